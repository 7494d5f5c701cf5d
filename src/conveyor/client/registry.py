"""Job registration: ``@app.job`` turns a function into a ``JobFunction`` (``job_function.py``)
known by a stable name, and the ``Registry`` holds them by that name.

The name, not the function object, is what is stored with each job; a worker looks it up in
its ``Registry``. The default name is ``f"{func.__module__}.{func.__qualname__}"``; pass
``name=`` to keep the stored name when you move or rename the function. A function defined in
a script run as ``python myapp.py`` is named after the module a worker imports it as
(``myapp.register_product``), never ``__main__.…``, which no worker could resolve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from conveyor.client.builtin_jobs import (
    COLLECT_JOB,
    ERRBACK_JOB,
    MAP_JOB,
    collect,
    run_errback,
    run_map,
)
from conveyor.client.job_function import Enqueuer, JobFunction
from conveyor.client.options import JobOptions, KeyOption, make_options
from conveyor.client.signature import Signature
from conveyor.core.naming import (
    UnimportableJobError,
    check_importable,
    default_name,
    importable_module,
)
from conveyor.core.text import check_name
from conveyor.errors import UnknownJobError

# JobOptions, KeyOption and make_options lived here before options.py, the names before
# naming.py, Enqueuer and JobFunction before job_function.py: still importable here.
__all__ = [
    "MAP_JOB", "Enqueuer", "JobFunction", "JobOptions", "KeyOption", "Registry", "Signature",
    "UnimportableJobError",
    "check_importable", "default_name", "importable_module", "make_options",
]


class Registry:
    """Job functions by name, as the worker looks them up; ``get`` also finds conveyor's own
    jobs (``conveyor.client.builtin_jobs``), which ``names()`` does not list."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobFunction] = {}
        self._builtin: dict[str, JobFunction] = {}
        self._resolver: Callable[[str], JobFunction | None] | None = None
        self._resolved: dict[str, JobFunction] = {}
        self._aggregators: dict[str, Callable[..., Any]] = {}
        self._aggregator_fns: dict[str, JobFunction] = {}

    def add_builtins(self, enqueuer: Enqueuer) -> None:
        """Register conveyor's own jobs (``conveyor.client.builtin_jobs``), stored by
        ``enqueuer``."""
        for name, func in ((MAP_JOB, run_map), (COLLECT_JOB, collect),
                           (ERRBACK_JOB, run_errback)):
            self._builtin[name] = JobFunction(enqueuer, func, name, JobOptions())

    def add(self, fn: JobFunction) -> None:
        """Register ``fn`` under ``fn.name``.

        Registering the same function again (e.g. a module reloaded) replaces it; another
        function under a name already taken raises ``ValueError``, since the worker could not
        tell which one a stored job means.
        """
        check_name("job name", fn.name)
        if fn.is_async and fn.opts.executor == "process":
            raise ValueError(f"job {fn.name!r} is async def: it runs on the worker's event loop, "
                             "which cancels it at its timeout (executor='process' is for def "
                             "jobs)")
        existing = self._jobs.get(fn.name)
        if existing is not None and default_name(existing.func) != default_name(fn.func):
            raise ValueError(
                f"job name {fn.name!r} is already registered for {default_name(existing.func)}; "
                "pass name= to tell them apart"
            )
        self._jobs[fn.name] = fn

    def get(self, name: str) -> JobFunction | None:
        """The job registered under ``name``, or None; a name no job has is asked of the
        resolver (``set_resolver``), which may raise ``NotAJob``."""
        found = self._jobs.get(name) or self._builtin.get(name) or self._resolved.get(name)
        if found is None and self._resolver is not None:
            found = self._resolver(name)
            if found is not None:
                self._resolved[name] = found
        return found

    def typed_result(self, name: str, value: Any) -> Any:
        """A stored result of job ``name`` made its return annotation's type when that is
        typed (``conveyor.core.typed``); as it is for a name no job here has."""
        try:
            fn = self.get(name)
        except UnknownJobError:  # a name a resolver refuses: the value as stored
            return value
        return value if fn is None or fn.opts.aggregate else fn.shape.load_result(value)

    def set_resolver(self, resolver: Callable[[str], JobFunction | None]) -> None:
        """Find jobs registered elsewhere by name (the Django backend: the project's tasks,
        by their module path). ``resolver(name)`` returns the job, None for a name it does
        not know (yet: retried as any unknown job), or raises ``NotAJob`` for a name that
        will never be a job (the job ends dead at once)."""
        self._resolver = resolver

    def options(self, name: str) -> JobOptions | None:
        """The options of the job registered under ``name``, or None."""
        fn = self.get(name)
        return None if fn is None else fn.opts

    def add_aggregator(self, name: str, func: Callable[..., Any]) -> None:
        """Register ``func`` as the aggregator of the job ``name`` (``@app.aggregate``)."""
        check_name("job name", name)
        existing = self._aggregators.get(name)
        if existing is not None and default_name(existing) != default_name(func):
            raise ValueError(f"job {name!r} already has the aggregator "
                             f"{default_name(existing)}")
        self._aggregators[name] = func
        self._aggregator_fns.pop(name, None)

    def has_aggregator(self, name: str) -> bool:
        """True when the job ``name`` has an aggregator registered."""
        return name in self._aggregators

    def aggregator(self, name: str) -> JobFunction | None:
        """The aggregator of the job ``name`` as a ``JobFunction`` with the job's options (its
        timeout and retry rules apply to the run), or None."""
        found = self._aggregator_fns.get(name)
        func = self._aggregators.get(name)
        job = self._jobs.get(name)
        if found is None and func is not None and job is not None:
            found = self._aggregator_fns[name] = JobFunction(job.enqueuer, func, name, job.opts)
        return found

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._jobs)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[JobFunction]:
        return iter(list(self._jobs.values()))
