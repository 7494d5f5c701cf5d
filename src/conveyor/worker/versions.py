"""The worker's side of job versions (docs/durable.md, "Safe deploys"; the rules are
``conveyor.core.versions``): at lease time, a job of a versioned type is checked against
this code's version and what it accepts, and its stored arguments are migrated by the
type's upcasters before typed arguments are made.

A job this code cannot run is left, not failed: the worker acknowledges it ``SNOOZE`` (the
ack of ``RetryAfter``: ``scheduled`` again later, no attempt spent, a ``snoozed`` event and
the job's message saying why), so a compatible worker takes it when it is due again. The
delay grows with the job's attempts (each lease is one): 15 s, 30 s, 60 s… at most 5 min.
A rolling deploy's compatible workers meet the job within seconds to minutes, and a worker
that cannot run it leases it at most once per delay, never in a loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.client.registry import JobFunction
from conveyor.core.job import LeasedJob
from conveyor.core.steps import Step
from conveyor.core.versions import (
    VERSION_STEP,
    chain,
    enqueued_version,
    started_version,
    verdict,
)
from conveyor.storage.base import Storage

__all__ = ["LEAVE_FIRST", "LEAVE_MOST", "Incompatible", "VersionGate", "leave_delay"]

#: Seconds a left job waits at its first lease, and at most.
LEAVE_FIRST, LEAVE_MOST = 15.0, 300.0


class Incompatible(Exception):
    """This code cannot run the job: one line naming it, its version and why."""


def leave_delay(attempt: int) -> float:
    """Seconds until a left job is due again, given its attempt (each lease is one)."""
    return min(LEAVE_FIRST * float(2 ** min(max(attempt - 1, 0), 5)), LEAVE_MOST)


class VersionGate:
    """One leased job of a versioned type: ``migrate`` decides and migrates; ``records``
    holds the durable records read to find its starting version (the job's context reuses
    them: no second read)."""

    def __init__(self, storage: Storage, job: LeasedJob, fn: JobFunction) -> None:
        self.job, self.fn = job, fn
        self.records: dict[str, Step] | None = None
        self.started: int | None = None
        if job.attempt > 1:  # a first attempt has recorded nothing yet
            self.records = {s.name: s for s in storage.durable.read(job.id).steps}
            rec = self.records.get(VERSION_STEP)
            self.started = None if rec is None else started_version(rec.result)

    def migrate(self, args: list[Any], kwargs: dict[str, Any],
                meta: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The job's JSON arguments at this code's version; ``Incompatible`` when it cannot
        run here, ``ValueError`` naming the upcaster that failed."""
        opts, job = self.fn.opts, self.job
        assert opts.version is not None and opts.accepts is not None
        enqueued = enqueued_version(meta)
        why = verdict(opts.version, opts.accepts, self.fn.upcasters, enqueued, self.started)
        if why is not None:
            raise Incompatible(f"job {job.name} {job.id}: {why}; left for a worker that "
                               "accepts it")
        for step, upcast in enumerate(chain(self.fn.upcasters, enqueued, opts.version) or ()):
            try:
                moved: tuple[Sequence[Any], Mapping[str, Any]] = upcast(list(args), dict(kwargs))
                args, kwargs = list(moved[0]), dict(moved[1])
            except Exception as exc:  # the user's migration: its job ends with the reason
                raise ValueError(f"upcaster from version {enqueued + step} failed: "
                                 f"{type(exc).__name__}: {exc}") from None
        return args, kwargs
