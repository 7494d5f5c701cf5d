"""conveyor's own jobs, known to every app's registry (``Registry.get`` finds them, ``names``
does not list them): the steps a canvas needs besides the user's jobs.

- ``conveyor.map`` (``MAP_JOB``): ``fn.map(items)`` / ``fn.starmap(items)`` and ``chunks``,
  one job calling a job function on each item in turn.
- ``conveyor.collect`` (``COLLECT_JOB``): the list a group gives what follows where no
  job of the user's gives it: an empty group (``[]``, after everything before it), a chain
  that ends in a group inside another group or a chord's header (its list, one value).
- ``conveyor.errback`` (``ERRBACK_JOB``): runs after a job that has error callbacks
  (``sig.link_error``) and calls each one with the failed job's id, error and traceback,
  as Celery's errbacks are called; after a job that succeeded it does nothing.

Each looks the job it calls up by name in the app it runs in (``current_job().runtime``):
names from stored data are looked up, never imported.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from conveyor.client.context import Callee, current_job
from conveyor.core.job import JobState
from conveyor.core.reraise import failure, last_error
from conveyor.errors import UnknownJobError

__all__ = ["COLLECT_JOB", "ERRBACK_JOB", "MAP_JOB", "collect", "run_errback", "run_map"]

MAP_JOB = "conveyor.map"
COLLECT_JOB = "conveyor.collect"
ERRBACK_JOB = "conveyor.errback"


def _job(name: str) -> Callee:
    runtime = current_job().runtime
    fn = runtime.function(name) if runtime is not None else None
    if fn is None:
        raise UnknownJobError(f"no job named {name!r} in this worker")
    return fn


def _call(fn: Callee, *args: Any, **kwargs: Any) -> Any:
    value = fn.func(*args, **kwargs)
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def run_map(name: str, items: list[Any], star: bool = False) -> list[Any]:
    """The body of ``MAP_JOB``: the job ``name`` called on each item in this run, in order
    (``star``: each item is its positional arguments); returns the results."""
    fn = _job(name)
    return [_call(fn, *(list(item) if star else [item])) for item in items]


def collect(values: list[Any] | None = None) -> list[Any]:
    """The body of ``COLLECT_JOB``: the values it was given (its parents' results), or
    ``[]`` for an empty group."""
    return list(values or [])


def run_errback(name: str, args: list[Any], kwargs: dict[str, Any], failed_id: str,
                immutable: bool = False) -> Any:
    """The body of ``ERRBACK_JOB``: if the job ``failed_id`` ran and ended failed or dead,
    call the job ``name`` with ``(failed_id, error, traceback, *args, **kwargs)`` (its own
    arguments alone when ``immutable``); returns what it returned. A job that succeeded,
    was cancelled, or was ended by its workflow before it ran (a parent failed) calls
    nothing: its errbacks are for the job that failed first."""
    runtime = current_job().runtime
    record = runtime.record(failed_id) if runtime is not None else None
    if record is None or record.state not in (JobState.FAILED, JobState.DEAD) \
            or record.attempt == 0:
        return None
    fn = _job(name)
    if immutable:
        return _call(fn, *args, **kwargs)
    error = failure(record)
    traceback = last_error(record).get("traceback", "")
    return _call(fn, failed_id, error, traceback, *args, **kwargs)
