"""``conveyor check-compat``'s view (docs/durable.md, "Safe deploys"): the stored jobs not
yet finished that the given code cannot run, grouped by job name, version and reason.

The rules are the worker's (``conveyor.core.versions``): a job of a versioned type is read
for the version that enqueued it (its meta, in clear even when its data is sealed) and, when
it has run before, the version that started it (its ``@version`` step record). A job whose
name the code does not define is listed too: no worker of this code could run it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from conveyor.client.registry import Registry
from conveyor.core.job import TERMINAL_STATES, JobRecord, JobState
from conveyor.core.versions import VERSION_STEP, enqueued_version, started_version, verdict
from conveyor.errors import NotAJob
from conveyor.storage.base import Inspector

__all__ = ["EXAMPLES", "Problem", "compat_view", "problem_of"]

#: How many job ids each problem shows.
EXAMPLES = 3
_PAGE = 500


@dataclass
class Problem:
    """Jobs of one name and version this code cannot run, for one reason."""

    name: str
    version: int | None
    reason: str
    count: int = 0
    states: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"name": self.name, "version": self.version, "reason": self.reason,
                "count": self.count, "states": self.states, "examples": self.examples}


def _unfinished(storage: Inspector) -> Iterator[JobRecord]:
    for state in JobState:
        if state in TERMINAL_STATES:
            continue
        offset = 0
        while True:
            page = storage.list_jobs(state=state, offset=offset, limit=_PAGE)
            yield from page
            if len(page) < _PAGE:
                break
            offset += len(page)


def problem_of(storage: Inspector, registry: Registry,
               job: JobRecord) -> tuple[int | None, str] | None:
    """``(version, why)`` when the code of ``registry`` cannot run ``job``, else None."""
    try:
        fn = registry.get(job.name)
    except NotAJob as refused:
        return None, str(refused)
    if fn is None:
        return None, "no job of this name in this code"
    opts = fn.opts
    if opts.version is None or opts.accepts is None or opts.aggregate is not None:
        return None  # an unversioned type runs every job, as before versions existed
    try:
        meta = json.loads(job.payload).get("m")
    except (ValueError, AttributeError):
        meta = None
    enqueued = enqueued_version(meta if isinstance(meta, dict) else None)
    started = None
    if job.attempt > 0:  # a job never leased has no durable record
        rec = next((s for s in storage.durable.read(job.id).steps if s.name == VERSION_STEP),
                   None)
        started = None if rec is None else started_version(rec.result)
    why = verdict(opts.version, opts.accepts, fn.upcasters, enqueued, started)
    return None if why is None else (started if started is not None else enqueued, why)


def compat_view(storage: Inspector, registry: Registry) -> dict[str, Any]:
    """``{"checked": n, "problems": [Problem.as_dict()...]}`` over every unfinished job."""
    problems: dict[tuple[str, int | None, str], Problem] = {}
    checked = 0
    for job in _unfinished(storage):
        checked += 1
        found = problem_of(storage, registry, job)
        if found is None:
            continue
        version, why = found
        problem = problems.setdefault((job.name, version, why), Problem(job.name, version, why))
        problem.count += 1
        problem.states[job.state.value] = problem.states.get(job.state.value, 0) + 1
        if len(problem.examples) < EXAMPLES:
            problem.examples.append(job.id)
    return {"checked": checked,
            "problems": [p.as_dict() for p in sorted(
                problems.values(), key=lambda p: (p.name, p.version or 0, p.reason))]}
