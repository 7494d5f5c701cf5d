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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

from conveyor.client.builtin_jobs import (
    COLLECT_JOB,
    ERRBACK_JOB,
    MAP_JOB,
    collect,
    run_errback,
    run_map,
)
from conveyor.client.options import (
    JobOptionArgs,
    JobOptions,
    KeyOption,
    by_name_keys,
    make_options,
)
from conveyor.client.refs import JobRef
from conveyor.client.signature import CanvasOps, Signature
from conveyor.core.calls import CallShape
from conveyor.core.naming import (
    UnimportableJobError,
    check_importable,
    default_name,
    importable_module,
)
from conveyor.core.text import check_name
from conveyor.core.versions import Upcaster, accepted
from conveyor.errors import UnknownJobError, WorkflowError

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the package runs on 3.10
    from typing_extensions import Unpack

# JobOptions, KeyOption and make_options lived here before options.py, the names before
# naming.py: still importable here.
__all__ = [
    "MAP_JOB", "Enqueuer", "JobFunction", "JobOptions", "KeyOption", "Registry", "Signature",
    "UnimportableJobError",
    "check_importable", "default_name", "importable_module", "make_options",
]

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

    @property
    def canvas(self) -> CanvasOps:
        """What composes the job functions' signatures (``conveyor.workflow.canvas``)."""
        ...


class JobFunction:
    """A registered job: call it to run the function here, ``enqueue`` it to run it in a worker.

    ``enqueue*`` return ``None`` instead of a ``JobRef`` when a client middleware stopped the
    enqueue (see ``conveyor.client.middleware``). ``enqueuer`` is what stores them: the app's
    client.
    Every enqueue checks its arguments against the function's signature first
    (``check_call``): a call that could never run raises ``TypeError`` and stores nothing.
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
        self._shape: CallShape | None = None
        #: ``from_version -> upcaster`` (``upcaster``); a copy by ``options`` shares them.
        self.upcasters: dict[int, Upcaster] = {}

    def __repr__(self) -> str:
        return f"<JobFunction {self.name} queue={self.opts.queue}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function directly, in this process (no storage involved)."""
        return self.func(*args, **kwargs)

    @property
    def canvas(self) -> CanvasOps:
        """What composes its signatures: its client's (``Enqueuer.canvas``)."""
        return self.enqueuer.canvas

    @property
    def shape(self) -> CallShape:
        """The calls the function accepts (``conveyor.core.calls``)."""
        if self._shape is None:
            self._shape = CallShape(self.func, self.name)
        return self._shape

    def check_call(self, args: Sequence[Any], kwargs: Mapping[str, Any], leading: int = 0,
                   what: str = "") -> tuple[Sequence[Any], Mapping[str, Any]]:
        """Raise ``TypeError`` (one line) unless ``args``/``kwargs`` bind to the function,
        after ``leading`` values given in front of them (a workflow node's parents' results);
        returns the arguments to store: typed ones (a pydantic model, a dataclass, a
        ``TypedDict``: ``conveyor.core.typed``) validated and made JSON, the rest as given.
        An aggregated job's arguments are its aggregator's to read (the function itself is
        never called with them): not checked."""
        if self.opts.aggregate is not None:
            return args, kwargs
        return self.shape.convert(args, kwargs, leading, what)

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run as soon as a worker is free.

        ``connection=conn`` (the application's database connection: psycopg, SQLAlchemy,
        Django) writes the job in that connection's open transaction, so it exists if and
        only if the transaction commits; it is not passed to the job. A JSON value under that
        name (a string, a number) is an ordinary argument.
        """
        return self.enqueuer.enqueue_function(self, args, kwargs)

    def send(self, args: Sequence[Any], kwargs: Mapping[str, Any], *,
             delay: float | timedelta | None = None,
             at: datetime | float | None = None) -> JobRef | None:
        """Enqueue with exactly these arguments, ``delay`` seconds from now or ``at`` a time
        (what a ``Signature`` calls)."""
        return self.enqueuer.enqueue_function(self, args, kwargs, delay=delay, at=at)

    async def asend(self, args: Sequence[Any], kwargs: Mapping[str, Any], *,
                    delay: float | timedelta | None = None,
                    at: datetime | float | None = None) -> JobRef | None:
        """``send`` for asyncio code."""
        return await self.enqueuer.aenqueue_function(self, args, kwargs, delay=delay, at=at)

    def enqueue_in(self, delay: float | timedelta, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run ``delay`` seconds (or a ``timedelta``) from now."""
        return self.enqueuer.enqueue_function(self, args, kwargs, delay=delay)

    def enqueue_at(self, when: datetime, *args: Any, **kwargs: Any) -> JobRef | None:
        """Store the job to run at ``when``, a timezone-aware datetime."""
        return self.enqueuer.enqueue_function(self, args, kwargs, at=when)

    def apply_async(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                    **options: Any) -> JobRef | None:
        """Celery's ``task.apply_async(args, kwargs, countdown=, eta=, queue=, link=,
        link_error=)``: ``self.s().apply_async(...)``."""
        return self.s().apply_async(args, kwargs, **options)

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
        with millions of items (e.g. from a generator) runs in bounded memory. An item that
        cannot be stored (arguments that do not fit the function, or are not JSON) raises,
        naming the item; the items before it are stored.

        With ``connection`` (the application's database connection) the jobs are written in
        its open transaction, as in ``app.transaction(connection)``.
        """
        return self.enqueuer.enqueue_many_function(self, items, return_refs=return_refs,
                                                   connection=connection)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This job with its arguments, not enqueued: a step of a workflow or canvas
        (``workflow.add(extract.s("orders"))``), as Celery's signatures; a step after
        another gets its result in front of these arguments."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature (Celery's ``si``): never given a previous step's result,
        nor arguments at enqueue; only these."""
        return Signature(self, args, kwargs, immutable=True)

    def signature(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                  *, immutable: bool = False) -> Signature:
        """Celery's ``task.signature(args, kwargs, immutable=...)``."""
        return Signature(self, args, kwargs, immutable=immutable)

    def map(self, items: Iterable[Any]) -> Signature:
        """One job that calls this function on each item in turn and returns the list of
        results (Celery's ``task.map``): a step of a workflow or canvas. An error in any item
        retries the whole job by this job's rules; for a job per item, use
        ``group(fn.s(i) for i in items)``."""
        listed = [self.check_call([item], {}, what=f"map item {index}")[0][0]
                  for index, item in enumerate(items)]
        return self.builtin(MAP_JOB, run_map, (self.name, listed, False))

    def starmap(self, items: Iterable[Sequence[Any]]) -> Signature:
        """As ``map``, each item being the positional arguments (Celery's ``task.starmap``)."""
        listed = [list(self.check_call(list(item), {}, what=f"starmap item {index}")[0])
                  for index, item in enumerate(items)]
        return self.builtin(MAP_JOB, run_map, (self.name, listed, True))

    def chunks(self, items: Iterable[Sequence[Any]], size: int) -> Any:
        """Celery's ``task.chunks(items, size)``, as ``conveyor.chunks(self, items, size)``:
        a group of ``starmap`` jobs of ``size`` calls each."""
        if size < 1:
            raise WorkflowError(f"chunks need a size of at least 1, not {size}")
        calls = [list(item) for item in items]
        return self.canvas.group([self.starmap(calls[i:i + size])
                                  for i in range(0, len(calls), size)])

    def builtin(self, name: str, func: Callable[..., Any], args: Sequence[Any]) -> Signature:
        """A step of conveyor's own job ``name`` (``conveyor.client.builtin_jobs``) run on this
        job's queue, with its retries and timeout."""
        o = self.opts
        opts = JobOptions(queue=o.queue, max_retries=o.max_retries, timeout=o.timeout,
                          expires_in=o.expires_in, retry_in=o.retry_in)
        return Signature(JobFunction(self.enqueuer, func, name, opts), args, {})

    def options(self, **overrides: Unpack[JobOptionArgs]) -> JobFunction:
        """A copy with other options for the next enqueues, e.g. ``.options(queue="low")``.

        Takes the keywords of ``Conveyor.job`` (not ``name``); the copy is not registered,
        the worker runs it under the same name.
        """
        copy = JobFunction(self.enqueuer, self.func, self.name,
                           make_options(self.opts, **overrides))
        copy.upcasters = self.upcasters
        return copy

    def upcaster(self, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Register ``f(args, kwargs) -> (args, kwargs)`` migrating the stored arguments of
        a job of version ``from_version`` to ``from_version + 1``; the worker chains them up
        to this code's version before typed arguments are made (docs/durable.md)."""
        accepted(from_version, None)  # an int >= 1

        def register(f: Upcaster) -> Upcaster:
            self.upcasters[from_version] = f
            return f

        return register


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
