"""A job function: what ``@app.job`` returns, the function and the name it is stored under.

Call a ``JobFunction`` to run the function here; ``enqueue`` it (and its kin: ``enqueue_in``,
``enqueue_many``, the asyncio twins) to have a worker run it, through its ``Enqueuer`` (the
app's ``Client``); ``s``/``si``/``map``/``chunks`` make the signatures workflows and canvases
are built of. The worker finds it by name in the ``Registry`` (``registry.py``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

from conveyor.client.builtin_jobs import MAP_JOB, run_map
from conveyor.client.options import JobOptionArgs, JobOptions, by_name_keys, make_options
from conveyor.client.refs import JobRef
from conveyor.client.signature import CanvasOps, Signature
from conveyor.core.calls import CallShape
from conveyor.core.versions import Upcaster, accepted
from conveyor.errors import WorkflowError

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the package runs on 3.10
    from typing_extensions import Unpack

__all__ = ["Enqueuer", "JobFunction"]


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
