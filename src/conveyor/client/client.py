"""The client side of the engine, Sidekiq style: ``Client`` turns an enqueue into a stored job.

An enqueue becomes an ``EnqueueDraft`` (``draft.py``), passes through the client middleware
(``middleware.py``), becomes a ``JobSpec`` and is pushed to the storage: at once, or through a
``SpecBuffer`` (``spec_buffer.py``) that stores 1,000 at a time (``enqueue_many`` and
``with app.batch()`` blocks). Each push returns a ``JobRef`` (``refs.py``). ``Conveyor``
builds one ``Client`` and hands it to every ``JobFunction`` and ``Batch``; the client knows
the storage, the clock, the registry (options of a job enqueued by name), the payload limit
and what is done to job data (``payloads.py``), and nothing else of the app.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal, overload

from conveyor.client.bulk import Threaded, Writers, blocks, refs_of, stored
from conveyor.client.context import current_batch
from conveyor.client.draft import EnqueueDraft, build_spec, run_at_from
from conveyor.client.middleware import ClientChain
from conveyor.client.options import JobOptions, make_options
from conveyor.client.payloads import JobData, result_value
from conveyor.client.refs import JobLookup, JobRef
from conveyor.client.registry import JobFunction, Registry, check_importable
from conveyor.client.reveal import texts_opened
from conveyor.client.signature import CanvasOps
from conveyor.client.spec_buffer import CHUNK_SIZE, SpecBuffer
from conveyor.core.calls import split_item
from conveyor.core.clock import SYSTEM_CLOCK, Clock
from conveyor.core.job import EnqueueResult, JobRecord, JobSpec
from conveyor.core.serializer import DEFAULT_MAX_PAYLOAD
from conveyor.errors import NoAggregatorError
from conveyor.storage import Backend, Storage
from conveyor.storage.aio import Waiter
from conveyor.storage.base import SendsBlocks

# EnqueueDraft, build_spec, run_at_from, JobLookup and JobRef lived here before draft.py and
# refs.py, CHUNK_SIZE and SpecBuffer before spec_buffer.py; they stay importable from here,
# where client middleware, batches and workflows have been importing them.
__all__ = [
    "CHUNK_SIZE", "Client", "EnqueueDraft", "JobLookup", "JobRef", "SpecBuffer", "build_spec",
    "latest_client", "run_at_from",
]

# What a job argument can be (JSON): a ``connection=`` keyword of any other type could never be
# stored, so it names the application's connection instead (``Client.enqueue_function``).
_JSON_VALUES = (str, bool, int, float, list, tuple, dict)


_latest: list[weakref.ref[Client]] = []


def latest_client() -> Client | None:
    """The client of the app created last in this process, if it is still alive: where a
    canvas with no job of any app (an empty group) is stored, as Celery uses its current
    app."""
    found = _latest[0]() if _latest else None
    return found


class Client:
    """Builds jobs, runs them through the client middleware and pushes them to the storage.

    ``storage`` is called for the storage at each push (the app opens it on first use, and
    again after a fork); ``registry`` gives the options of a job enqueued by name; ``canvas``
    composes its job functions' signatures (the app gives ``conveyor.workflow.canvas``'s).
    """

    def __init__(
        self,
        storage: Callable[[], Backend],
        registry: Registry,
        *,
        clock: Clock = SYSTEM_CLOCK,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        middleware: ClientChain | None = None,
        data: JobData | None = None,
        canvas: CanvasOps | None = None,
    ) -> None:
        self._storage = storage
        self.data = data if data is not None else JobData()  # seals, offloads: payloads.py
        self._canvas = canvas
        self.registry = registry
        self.clock = clock
        self.max_payload = max_payload
        self.middleware = middleware if middleware is not None else ClientChain()
        self._bound: ContextVar[Storage | None] = ContextVar(f"conveyor-tx-{id(self)}",
                                                             default=None)
        self._writers = Writers()  # threads storing enqueue_many's blocks
        _latest[:] = [weakref.ref(self)]

    def __repr__(self) -> str:
        return f"<Client jobs={len(self.registry)} middleware={len(self.middleware)}>"

    def close(self) -> None:
        """Stop the threads that store ``enqueue_many``'s blocks (they start again when
        needed); ``Conveyor.close`` calls it."""
        self._writers.close()

    @property
    def canvas(self) -> CanvasOps:
        """What composes signatures (``a.s() | b.s()``) and stores them with their links."""
        if self._canvas is None:
            raise RuntimeError("this client has no canvas: build it with Conveyor(...)")
        return self._canvas

    @property
    def storage(self) -> Backend:
        """The storage jobs are pushed to."""
        return self._storage()

    @property
    def writer(self) -> Storage:
        """Where enqueues are written: inside ``transaction``, the storage bound to the
        application's transaction; elsewhere the storage itself."""
        return self._bound.get() or self.storage

    @contextmanager
    def transaction(self, connection: object) -> Iterator[None]:
        """Every enqueue of this client in the block (jobs, bulk enqueues, batches) is written
        in the open transaction of ``connection``, the application's own database connection:
        it exists if and only if that transaction commits (``Storage.bind``).

        Jobs a batch block opened before this one had buffered are stored first, outside it;
        inside, nothing is buffered past the enqueue that made it.
        """
        writer = self.storage.bind(connection)
        scope = current_batch()
        if scope is not None:
            scope.reserve(0)  # stores what the batch buffered before this block, outside it
        token = self._bound.set(writer)
        try:
            yield
        finally:
            self._bound.reset(token)

    def get_job(self, job_id: str) -> JobRecord | None:
        """A stored job with its state and events, or None (what a ``JobRef`` reads); its
        sealed messages and errors opened (``conveyor.client.reveal``)."""
        return texts_opened(self.storage.get_job(job_id), self.data)

    def result_of(self, record: JobRecord) -> Any:
        """A job's result, opened (``conveyor.client.payloads``) and typed
        (``conveyor.core.typed``)."""
        value = result_value(record.result, self.data, record.id) if record.result else None
        return None if value is None else self.registry.typed_result(record.name, value)

    # -- enqueue ----------------------------------------------------------------------------

    def enqueue(
        self, name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
        meta: Mapping[str, Any] | None = None, delay: float | timedelta | None = None,
        at: datetime | float | None = None, connection: object = None, **options: Any,
    ) -> JobRef | None:
        """Enqueue a job by name (``Conveyor.enqueue``); ``options`` override the registered
        job's; ``connection`` as in ``transaction``. None if a middleware stopped it."""
        fn = self.registry.get(name)
        if fn is not None:
            args, kwargs = fn.check_call(args, kwargs or {})
        opts = make_options(fn.opts if fn is not None else None, **options)
        draft = self.draft(name, opts, args, kwargs or {}, delay, at)
        draft.meta.update(meta or {})
        if connection is not None:
            with self.transaction(connection):
                return self.push(draft)
        return self.push(draft)

    def enqueue_function(
        self, fn: JobFunction, args: Sequence[Any], kwargs: Mapping[str, Any], *,
        delay: float | timedelta | None = None, at: datetime | float | None = None,
    ) -> JobRef | None:
        """What ``JobFunction.enqueue``/``enqueue_in``/``enqueue_at`` call.

        A ``connection=`` keyword whose value is not JSON (so could never be an argument) is
        the application's connection: the job joins its transaction (``transaction``).
        """
        connection = kwargs.get("connection")
        if connection is None or isinstance(connection, _JSON_VALUES):
            args, kwargs = fn.check_call(args, kwargs)
            return self.push(self.draft(fn.name, fn.opts, args, kwargs, delay, at))
        args, rest = fn.check_call(args, {k: v for k, v in kwargs.items() if k != "connection"})
        with self.transaction(connection):
            return self.push(self.draft(fn.name, fn.opts, args, rest, delay, at))

    async def aenqueue_function(
        self, fn: JobFunction, args: Sequence[Any], kwargs: Mapping[str, Any], *,
        delay: float | timedelta | None = None, at: datetime | float | None = None,
    ) -> JobRef | None:
        """``enqueue_function`` for asyncio code (``JobFunction.aenqueue``)."""
        connection = kwargs.get("connection")
        if connection is not None and not isinstance(connection, _JSON_VALUES):
            return await asyncio.to_thread(self.enqueue_function, fn, args, kwargs,
                                           delay=delay, at=at)
        args, kwargs = fn.check_call(args, kwargs)
        return await self.apush(self.draft(fn.name, fn.opts, args, kwargs, delay, at))

    async def aenqueue(
        self, name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
        meta: Mapping[str, Any] | None = None, delay: float | timedelta | None = None,
        at: datetime | float | None = None, **options: Any,
    ) -> JobRef | None:
        """``enqueue`` (by name) for asyncio code."""
        fn = self.registry.get(name)
        if fn is not None:
            args, kwargs = fn.check_call(args, kwargs or {})
        opts = make_options(fn.opts if fn is not None else None, **options)
        draft = self.draft(name, opts, args, kwargs or {}, delay, at)
        draft.meta.update(meta or {})
        return await self.apush(draft)

    async def apush(self, draft: EnqueueDraft) -> JobRef | None:
        """``push`` for asyncio code. Without client middleware, outside a batch block and a
        bound transaction (nearly every enqueue) the job is stored with the storage's own
        asyncio I/O; otherwise the whole push runs in a thread (the context goes with it:
        the batch block, the transaction, the trace), so middleware runs as it always does."""
        if self.middleware or current_batch() is not None or self._bound.get() is not None \
                or self.data.offload is not None:  # a blob store's writes block too
            return await asyncio.to_thread(self.push, draft)
        spec = self.build_spec(draft)
        [result] = await self.storage.aenqueue([spec])
        return JobRef(result.id, result.created, self)

    async def aget_job(self, job_id: str) -> JobRecord | None:
        """``get_job`` for asyncio code (what ``JobRef.aresult`` reads)."""
        return texts_opened(await self.storage.aget_job(job_id), self.data)

    def afinished(self, job_id: str, queue: str) -> AbstractAsyncContextManager[Waiter]:
        """The storage's wake-ups when a job ends (what ``JobRef.aresult`` waits on)."""
        return self.storage.afinished(job_id, queue)

    def enqueue_many_function(
        self, fn: JobFunction, items: Iterable[Any], *, return_refs: bool,
        connection: object = None,
    ) -> list[JobRef] | int:
        """What ``JobFunction.enqueue_many`` calls. Items are read as they are reached, so a
        generator of millions of items runs in bounded memory.

        With client middleware registered, each item becomes a draft the middleware sees
        (``push_many``); without, the items go to the storage as blocks of columns
        (``bulk.py``), which stores the same jobs at a fraction of the cost. Either way an item
        that cannot be stored raises, and the items before it are stored.
        """
        if connection is not None:
            with self.transaction(connection):
                return self.enqueue_many_function(fn, items, return_refs=return_refs)
        if self.middleware:
            drafts = (self._item_draft(fn, item, index) for index, item in enumerate(items))
            return self.push_many(drafts, return_refs=return_refs)
        self.check_aggregator(fn.name, fn.opts)
        storage = self.writer  # opened first, even for no items, as push_many does
        scope = current_batch()
        refs: list[JobRef] = []
        count = 0
        pairs = blocks(fn.name, fn.opts, items, now=self.clock.now, max_payload=self.max_payload,
                       batch_id=scope.id if scope is not None else None,
                       shape=fn.shape if fn.opts.aggregate is None else None,
                       data=self.data if self.data.active else None)
        # Inside a batch block its buffered jobs are stored first, and the block's counted.
        before = (lambda block: scope.reserve(len(block))) if scope is not None else _nothing
        prepare = (storage.prepare_block if isinstance(storage, SendsBlocks)
                   else partial(Threaded, self._writers, storage.enqueue_block))
        for results in stored(pairs, storage.enqueue_block, prepare, before):
            count += len(results)
            if return_refs:
                refs += refs_of(results, self)
        return refs if return_refs else count

    def _item_draft(self, fn: JobFunction, item: Any, index: int) -> EnqueueDraft:
        """The draft of one ``enqueue_many`` item, its arguments checked."""
        args, kwargs = fn.check_call(*split_item(item, index), what=f"enqueue_many item {index}")
        return self.draft(fn.name, fn.opts, args, kwargs)

    def draft(
        self, name: str, opts: JobOptions, args: Sequence[Any], kwargs: Mapping[str, Any],
        delay: float | timedelta | None = None, at: datetime | float | None = None,
    ) -> EnqueueDraft:
        """The draft of one job, in the batch whose block is open here (if any)."""
        check_importable(name)
        scope = current_batch()
        # Schedules use this process's clock (leases never do): a skew of a few seconds
        # shifts a scheduled job by as much, which is harmless.
        return EnqueueDraft(
            name=name, args=list(args), kwargs=dict(kwargs), options=opts,
            run_at=run_at_from(self.clock.now(), delay, at),
            batch_id=scope.id if scope is not None else None,
        )

    # -- push -------------------------------------------------------------------------------

    def push(self, draft: EnqueueDraft) -> JobRef | None:
        """Run ``draft`` through the client middleware and store it (inside a batch block,
        into the batch's buffer). None if a middleware stopped it."""
        return self.middleware.run_client(draft, partial(self._route, draft, None))

    @overload
    def push_many(
        self, drafts: Iterable[EnqueueDraft], *, return_refs: Literal[True]
    ) -> list[JobRef]: ...

    @overload
    def push_many(self, drafts: Iterable[EnqueueDraft], *, return_refs: Literal[False]) -> int: ...

    @overload
    def push_many(
        self, drafts: Iterable[EnqueueDraft], *, return_refs: bool
    ) -> list[JobRef] | int: ...

    def push_many(
        self, drafts: Iterable[EnqueueDraft], *, return_refs: bool
    ) -> list[JobRef] | int:
        """``push`` each draft, stored in chunks of ``CHUNK_SIZE`` (inside a batch block,
        through the batch's buffer); the refs, or with ``return_refs=False`` only the count.

        A draft that cannot be stored (not JSON, too large) raises; the drafts before it are
        stored all the same, as if they had been pushed one by one.
        """
        bulk = SpecBuffer(self.writer.enqueue)  # opens the storage first, even for no drafts
        refs: list[JobRef] = []
        count = 0
        try:
            for draft in drafts:
                ref = self.middleware.run_client(draft, partial(self._route, draft, bulk))
                if ref is not None:
                    count += 1
                    if return_refs:
                        refs.append(ref)
        finally:
            bulk.flush()
        return refs if return_refs else count

    def build_spec(self, draft: EnqueueDraft) -> JobSpec:
        """The ``JobSpec`` of a draft, now, under this client's payload limit."""
        self.check_aggregator(draft.name, draft.options)
        return build_spec(draft, self.clock.now(), self.max_payload, self.data)

    def check_aggregator(self, name: str, opts: JobOptions) -> None:
        """Refuse an aggregated job without an aggregator: its aggregation would never run."""
        if opts.aggregate is not None and not self.registry.has_aggregator(name):
            raise NoAggregatorError(
                f"job {name} is aggregated (aggregate=...) but has no aggregator: register "
                f"one with @app.aggregate({name.rsplit('.', 1)[-1]}) before enqueueing it")

    def store(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store built specs as they are (no middleware): what a ``SpecBuffer`` flushes to."""
        return self.writer.enqueue(specs)

    def _route(self, draft: EnqueueDraft, bulk: SpecBuffer | None) -> JobRef:
        """The last step of the client chain: store the draft, or buffer it."""
        spec = self.build_spec(draft)
        scope = current_batch()
        sink = scope if scope is not None and spec.batch_id == scope.id else bulk
        if sink is scope and scope is not None and self._bound.get() is not None:
            scope.reserve(1)  # in the application's transaction now, not at a later flush
            sink = None
        if sink is None:
            [result] = self.store([spec])
            return JobRef(result.id, result.created, self)
        ref = JobRef(spec.id, True, self)
        sink.add(spec, ref)
        return ref


def _nothing(block: object) -> None:
    """No step before a block outside a batch."""
