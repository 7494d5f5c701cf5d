"""Job registration: ``@app.job`` turns a function into a ``JobFunction`` known by a stable name.

The name, not the function object, is what is stored with each job; a worker looks it up in
its ``Registry``. The default name is ``f"{func.__module__}.{func.__qualname__}"``; pass
``name=`` to keep the stored name when you move or rename the function. A function defined in
a script run as ``python myapp.py`` is named after the module a worker imports it as
(``myapp.register_product``), never ``__main__.…``, which no worker could resolve.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, overload

from conveyor.context import current_job
from conveyor.errors import ConveyorError, UnknownJobError
from conveyor.options import JobOptions, KeyOption, by_name_keys, make_options
from conveyor.refs import JobRef
from conveyor.text import check_name

# JobOptions, KeyOption and make_options lived here before options.py; still importable here.
__all__ = [
    "Enqueuer", "JobFunction", "JobOptions", "KeyOption", "Registry", "Signature",
    "UnimportableJobError",
    "default_name", "importable_module", "make_options",
]

class UnimportableJobError(ConveyorError, TypeError):
    """A job function's default name points at ``__main__`` with no importable module."""


def default_name(func: Callable[..., Any]) -> str:
    """The stored name of a job function: ``module.qualname``.

    ``__main__`` is replaced by the module a worker would import the script as (see
    ``importable_module``); where there is none (an interactive session, ``python -c``) the
    name keeps ``__main__`` and enqueueing such a job raises ``UnimportableJobError``.
    """
    module = getattr(func, "__module__", None) or "__main__"
    if module == "__main__":
        module = importable_module() or module
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    return f"{module}.{qualname}"


def importable_module() -> str | None:
    """The name under which ``import`` would load the running ``__main__`` script, or None.

    ``python -m pkg.mod`` records it in ``__spec__``; ``python pkg/mod.py`` does not, so it
    is derived from the file's path relative to the first ``sys.path`` entry that holds it
    (the script's own directory comes first, as for the worker started from there).
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)  # pkg.__main__ for `python -m pkg`: importable as such
    path = getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    target = os.path.realpath(path)
    for entry in sys.path:
        base = os.path.realpath(entry or os.getcwd())
        rel = os.path.relpath(target, base)
        if rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
            continue
        parts = rel[: -len(".py")].split(os.sep)
        if parts[-1] == "__init__":
            parts.pop()
        if parts and all(p.isidentifier() for p in parts):
            return ".".join(parts)
    return None


def check_importable(name: str) -> None:
    """Refuse to store a job name that only this ``__main__`` process could resolve."""
    if name.startswith("__main__."):
        raise UnimportableJobError(
            f"job {name!r} is defined in a script no worker can import; move it into a "
            "module (e.g. myapp.py, run by `conveyor worker myapp:app`) or register it "
            "with @app.job(name=...) in a module the worker imports"
        )


class Enqueuer(Protocol):
    """Where a ``JobFunction`` sends its enqueues: the app's ``Client``."""

    def enqueue_function(
        self, fn: JobFunction, args: Sequence[Any], kwargs: Mapping[str, Any], *,
        delay: float | timedelta | None = None, at: datetime | float | None = None,
    ) -> JobRef | None:
        """Enqueue one job of ``fn``; None if a client middleware stopped it."""
        ...

    def enqueue_many_function(
        self, fn: JobFunction, items: Iterable[Any], *, return_refs: bool,
        connection: object = None,
    ) -> list[JobRef] | int:
        """Enqueue one job of ``fn`` per item; the refs, or how many were stored (in the
        transaction of ``connection`` when given)."""
        ...

    async def aenqueue_function(
        self, fn: JobFunction, args: Sequence[Any], kwargs: Mapping[str, Any], *,
        delay: float | timedelta | None = None, at: datetime | float | None = None,
    ) -> JobRef | None:
        """``enqueue_function`` for asyncio code."""
        ...


class JobFunction:
    """A registered job: call it to run the function here, ``enqueue`` it to run it in a worker.

    ``enqueue*`` return ``None`` instead of a ``JobRef`` when a client middleware stopped the
    enqueue (see ``conveyor.middleware``). ``enqueuer`` is what stores them: the app's client.
    """

    def __init__(
        self, enqueuer: Enqueuer, func: Callable[..., Any], name: str, opts: JobOptions
    ) -> None:
        self.enqueuer = enqueuer
        self.func = func
        self.name = name
        self.opts = by_name_keys(opts, func)
        self.is_async = inspect.iscoroutinefunction(func)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<JobFunction {self.name} queue={self.opts.queue}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function directly, in this process (no storage involved)."""
        return self.func(*args, **kwargs)

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run as soon as a worker is free.

        ``connection=conn`` (the application's database connection: psycopg, SQLAlchemy,
        Django) writes the job in that connection's open transaction, so it exists if and
        only if the transaction commits; it is not passed to the job. A JSON value under that
        name (a string, a number) is an ordinary argument.
        """
        return self.enqueuer.enqueue_function(self, args, kwargs)

    def enqueue_in(self, delay: float | timedelta, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run ``delay`` seconds (or a ``timedelta``) from now."""
        return self.enqueuer.enqueue_function(self, args, kwargs, delay=delay)

    def enqueue_at(self, when: datetime, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run at ``when``, a timezone-aware datetime."""
        return self.enqueuer.enqueue_function(self, args, kwargs, at=when)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> JobRef | None:
        """``enqueue`` for asyncio code: the event loop never waits on the storage (native
        asyncio I/O on Redis and PostgreSQL, a thread elsewhere; docs/api.md, "asyncio")."""
        return await self.enqueuer.aenqueue_function(self, args, kwargs)

    async def aenqueue_in(self, delay: float | timedelta, *args: Any,
                          **kwargs: Any) -> JobRef | None:
        """``enqueue_in`` for asyncio code."""
        return await self.enqueuer.aenqueue_function(self, args, kwargs, delay=delay)

    async def aenqueue_at(self, when: datetime, *args: Any, **kwargs: Any) -> JobRef | None:
        """``enqueue_at`` for asyncio code."""
        return await self.enqueuer.aenqueue_function(self, args, kwargs, at=when)

    async def aenqueue_many(self, items: Iterable[Any], *, return_refs: bool = True,
                            connection: object = None) -> list[JobRef] | int:
        """``enqueue_many`` for asyncio code (in a thread: it is mostly encoding)."""
        return await asyncio.to_thread(self.enqueuer.enqueue_many_function, self, items,
                                       return_refs=return_refs, connection=connection)

    @overload
    def enqueue_many(
        self, items: Iterable[Any], *, return_refs: Literal[True] = True, connection: object = None
    ) -> list[JobRef]: ...

    @overload
    def enqueue_many(
        self, items: Iterable[Any], *, return_refs: Literal[False], connection: object = None
    ) -> int: ...

    def enqueue_many(
        self, items: Iterable[Any], *, return_refs: bool = True, connection: object = None
    ) -> list[JobRef] | int:
        """Store one job per item, streamed to the storage in chunks of 1,000.

        Each item is the job's arguments: a list or tuple of positional arguments, a mapping of
        keyword arguments, or a 2-tuple ``(args, kwargs)``. Returns one ``JobRef`` per job
        stored; with ``return_refs=False`` it returns only how many were stored, so a call
        with millions of items (e.g. from a generator) runs in bounded memory.

        With ``connection`` (the application's database connection) the jobs are written in
        its open transaction, as in ``app.transaction(connection)``.
        """
        return self.enqueuer.enqueue_many_function(self, items, return_refs=return_refs,
                                                   connection=connection)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This job with its arguments, not enqueued: a step of a workflow
        (``workflow.add(extract.s("orders"))``), as Celery's signatures."""
        return Signature(self, args, kwargs)

    def map(self, items: Iterable[Any]) -> Signature:
        """One job that calls this function on each item in turn and returns the list of
        results (Celery's ``task.map``): a step of a workflow or canvas. An error in any item
        retries the whole job by this job's rules; for a job per item, use
        ``group(fn.s(i) for i in items)``."""
        return self._mapped([item for item in items], star=False)

    def starmap(self, items: Iterable[Sequence[Any]]) -> Signature:
        """As ``map``, each item being the positional arguments (Celery's ``task.starmap``)."""
        return self._mapped([list(item) for item in items], star=True)

    def _mapped(self, items: list[Any], star: bool) -> Signature:
        o = self.opts
        opts = JobOptions(queue=o.queue, max_retries=o.max_retries, timeout=o.timeout,
                          expires_in=o.expires_in, retry_in=o.retry_in)
        return Signature(JobFunction(self.enqueuer, run_map, MAP_JOB, opts),
                         (self.name, items, star), {})

    def options(self, **overrides: Any) -> JobFunction:
        """A copy with other options for the next enqueues, e.g. ``.options(queue="low")``.

        Takes the keywords of ``Conveyor.job`` (not ``name``); the copy is not registered,
        the worker runs it under the same name.
        """
        opts = make_options(self.opts, **overrides)
        return JobFunction(self.enqueuer, self.func, self.name, opts)


class Signature:
    """A job function with its arguments, to be enqueued later (``JobFunction.s``)."""

    __slots__ = ("args", "fn", "kwargs")

    def __init__(self, fn: JobFunction, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        self.fn = fn
        self.args = list(args)
        self.kwargs = dict(kwargs)

    def __repr__(self) -> str:
        return f"<Signature {self.fn.name} args={self.args!r} kwargs={self.kwargs!r}>"

    @property
    def name(self) -> str:
        """The job's stored name."""
        return self.fn.name

    def enqueue(self) -> JobRef | None:
        """Enqueue this job on its own, outside any workflow (Celery's ``sig.delay()``)."""
        return self.fn.enqueue(*self.args, **self.kwargs)

    async def aenqueue(self) -> JobRef | None:
        """``enqueue`` for asyncio code."""
        return await self.fn.aenqueue(*self.args, **self.kwargs)


def split_item(item: Any, index: int) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """(args, kwargs) of one ``enqueue_many`` item; ``TypeError`` naming the item otherwise."""
    if isinstance(item, Mapping):
        return (), item
    if (
        isinstance(item, tuple) and len(item) == 2
        and isinstance(item[0], (list, tuple)) and isinstance(item[1], Mapping)
    ):
        return item[0], item[1]
    if isinstance(item, (list, tuple)):
        return item, {}
    raise TypeError(
        f"enqueue_many item {index} is a {type(item).__name__}; give a list/tuple of args, "
        "a dict of kwargs, or an (args, kwargs) tuple"
    )


#: The built-in job behind ``JobFunction.map`` / ``starmap`` and ``canvas.chunks``.
MAP_JOB = "conveyor.map"


def run_map(name: str, items: list[Any], star: bool = False) -> list[Any]:
    """The body of ``MAP_JOB``: the job ``name`` called on each item in this run, in order
    (``star``: each item is its positional arguments); returns the results."""
    app = current_job().app
    fn = app.registry.get(name) if app is not None else None
    if fn is None:
        raise UnknownJobError(f"no job named {name!r} in this worker to map over")
    out: list[Any] = []
    for item in items:
        args = list(item) if star else [item]
        value = fn.func(*args)
        out.append(asyncio.run(value) if inspect.iscoroutine(value) else value)
    return out


class Registry:
    """Job functions by name, as the worker looks them up; ``get`` also finds the built-in
    ``MAP_JOB``, which ``names()`` does not list."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobFunction] = {}
        self._builtin: dict[str, JobFunction] = {}
        self._aggregators: dict[str, Callable[..., Any]] = {}
        self._aggregator_fns: dict[str, JobFunction] = {}

    def add_builtins(self, enqueuer: Enqueuer) -> None:
        """Register conveyor's own jobs (``MAP_JOB``), stored by ``enqueuer``."""
        self._builtin[MAP_JOB] = JobFunction(enqueuer, run_map, MAP_JOB, JobOptions())

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
        """The job registered under ``name``, or None."""
        return self._jobs.get(name) or self._builtin.get(name)

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
