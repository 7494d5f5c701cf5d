"""The vectorised path of ``enqueue_many``: items become ``JobBlock`` columns, not one draft,
middleware call, ``JobSpec`` and ``new_id`` per job.

``Client.enqueue_many_function`` takes it when no client middleware is registered, the one
case where it is equivalent to pushing drafts one by one: the same checks in the same order
(item shape, importable name, name and queue, payload, flow-control keys), the same payloads,
ids from the same sequence, the same records. Per ``BLOCK_SIZE`` items it encodes each payload
once and hands the block to ``Storage.enqueue_block``. An item that raises stops the call
after the items before it are stored, as ``push_many`` does.

``stored`` overlaps the two halves: while the storage stores block k, the caller's thread
reads and encodes block k+1, so the storage's own time per block is hidden behind the
client's instead of added to it. A storage that ``SendsBlocks`` (Redis) writes block k's
script call to a connection and reads the reply when block k+1 is ready; any other runs
``enqueue_block`` in a thread of the client's ``Writers`` (a transaction, on SQLite one
that releases the GIL while it works).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from itertools import islice
from typing import Any

from conveyor.client.draft import build_flow
from conveyor.client.options import JobOptions
from conveyor.client.payloads import JobData
from conveyor.client.refs import JobLookup, JobRef
from conveyor.client.registry import check_importable
from conveyor.core.calls import CallShape, split_item
from conveyor.core.ids import new_id, new_ids
from conveyor.core.job import EnqueueResult, FlowControl
from conveyor.core.serializer import encode_arg_lists, encode_args, encode_payload
from conveyor.core.text import check_name
from conveyor.core.versions import stamped
from conveyor.storage.base import Ready, Sent
from conveyor.storage.blocks import BlockResults, JobBlock

__all__ = ["BLOCK_SIZE", "Threaded", "Writers", "blocks", "refs_of", "stored"]

BLOCK_SIZE = 2000
"""Jobs per ``Storage.enqueue_block`` call from the bulk path (bounds the client's memory)."""


def blocks(
    name: str, opts: JobOptions, items: Iterable[Any], *, now: Callable[[], float],
    max_payload: int,
    batch_id: str | None,
    shape: CallShape | None = None,
    data: JobData | None = None,
) -> Iterator[tuple[JobBlock | None, BaseException | None]]:
    """``(block, None)`` per ``BLOCK_SIZE`` items; the last pair carries the error an item
    raised (with the block of the items before it, or None), after which nothing follows.

    ``now`` is the client clock's ``now``, read once per block (for ``expires_in``);
    ``shape``, the job function's, checks each item's arguments (``conveyor.core.calls``);
    ``data`` (an app that seals or offloads job data) wraps each payload, with an id made
    for it (``conveyor.client.payloads``).
    """
    flows_wanted = opts.has_flow
    meta = stamped(None, opts.version)  # a versioned type's stamp (core/versions.py)
    queue = opts.queue
    index = 0
    checked = False
    source = iter(items)
    while True:
        chunk: list[Any] = []
        payloads: list[str] = []
        ids: list[str] = []
        flows: list[FlowControl | None] | None = [] if flows_wanted else None
        error: BaseException | None = None
        try:
            # extend keeps the items read before the iterator itself raised
            chunk.extend(islice(source, BLOCK_SIZE))
        except BaseException as exc:
            error = exc
        try:
            typed = shape is not None and shape.typed
            fast = None if flows_wanted or typed or data is not None or meta \
                else encode_arg_lists(chunk, max_payload)
            if fast is not None:  # every item a list or tuple of scalars: one encoding
                if not checked:
                    _check_names(name, queue)
                    checked = True
                fit = _fitting(shape, chunk)
                payloads, index = fast[:fit], index + fit
                if fit < len(chunk) and shape is not None:
                    shape.check(chunk[fit], {}, what=f"enqueue_many item {index}")
            for item in chunk if fast is None else ():
                args, kwargs = _split(item, index)
                if shape is not None:
                    args, kwargs = shape.convert(args, kwargs, what=f"enqueue_many item {index}")
                index += 1
                if not checked:  # what build_spec checks per job cannot change between jobs
                    _check_names(name, queue)
                    checked = True
                if data is None:
                    payloads.append(encode_payload(args, kwargs, meta, max_payload) if meta
                                    else encode_args(args, kwargs, max_payload))
                else:
                    job_id = new_id()
                    text = encode_args(args, kwargs, data.encoding_limit(max_payload))
                    payloads.append(data.wrap(job_id, name, text, meta, max_payload,
                                              movable=opts.fold is not None))
                    ids.append(job_id)
                if flows is not None:
                    flows.append(build_flow(name, opts, list(args), kwargs))
        except BaseException as exc:  # stored up to the item at fault, then re-raised
            error = exc
        block = None
        if payloads:
            start = now()
            # debounce / throttle: the window starts now; expires_in counts from the run
            run_at = None if opts.fold is None else start + opts.fold.seconds
            block = JobBlock(
                name=name, queue=queue, ids=ids or new_ids(len(payloads)), payloads=payloads,
                max_retries=opts.max_retries, timeout=opts.timeout,
                deadline=None if opts.expires_in is None else (run_at or start) + opts.expires_in,
                batch_id=batch_id, flows=flows, run_at=run_at,
            )
        if block is not None or error is not None:
            yield block, error
        if error is not None or len(chunk) < BLOCK_SIZE:
            return


def _fitting(shape: CallShape | None, chunk: list[Any]) -> int:
    """How many items of ``chunk`` (each a list or tuple of positional arguments) fit the
    function before the first that does not."""
    if shape is None:
        return len(chunk)
    fits = shape.fits
    for position, item in enumerate(chunk):
        if not fits(len(item)):
            return position
    return len(chunk)


def _split(item: Any, index: int) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """``split_item``, without its ABC checks for the common shapes."""
    kind = type(item)
    if kind is list or (kind is tuple and not _pair(item)):
        return item, {}
    return split_item(item, index)


def _check_names(name: str, queue: str) -> None:
    check_importable(name)
    check_name("job name", name)
    check_name("queue", queue)


class Writers:
    """The threads that store blocks for one client: started on first use, then kept, so
    a storage that holds a connection per thread (SQLite) keeps using the same ones.

    Up to ``size`` callers of the client store at the same time. A forked child starts
    threads of its own (the parent's do not exist there).
    """

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()

    def submit(self, store: Callable[[JobBlock], Sequence[EnqueueResult]],
               block: JobBlock) -> Future[Sequence[EnqueueResult]]:
        """Store ``block`` in one of the threads."""
        if self._pid != os.getpid():
            # A forked child, where only this thread runs: the lock may have been held by a
            # thread of the parent at the fork, and the pool's threads are not there.
            self._lock, self._pool, self._pid = threading.Lock(), None, os.getpid()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._size, thread_name_prefix="conveyor-bulk")
            return self._pool.submit(store, block)

    def close(self) -> None:
        """Stop the threads once they are done (they start again on the next use)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=True)


class Threaded:
    """A block ``Writers`` will store (the ``Ready`` of a storage without ``prepare_block``)."""

    def __init__(self, writers: Writers, store: Callable[[JobBlock], Sequence[EnqueueResult]],
                 block: JobBlock) -> None:
        self.writers, self.store, self.block = writers, store, block

    def ahead(self) -> None:
        """Nothing: the thread does all of it."""

    def send(self) -> Future[Sequence[EnqueueResult]]:
        """Hand the block to a thread."""
        return self.writers.submit(self.store, self.block)


def stored(
    pairs: Iterable[tuple[JobBlock | None, BaseException | None]],
    store: Callable[[JobBlock], Sequence[EnqueueResult]],
    prepare: Callable[[JobBlock], Ready],
    before: Callable[[JobBlock], None],
) -> Iterator[Sequence[EnqueueResult]]:
    """The results of storing each block of ``pairs`` (``blocks``' output), in order; then
    the item's error, if one came, once every block before it is stored.

    Each block is made ready (``prepare``: ``SendsBlocks.prepare_block``, or a ``Threaded``)
    while the block before it is stored, then sent the moment that one's results are in (a
    block cut short by an item's error is stored there and then, with ``store``); only then
    are the results of the block before yielded, so the caller's work on them overlaps the
    storing of the next block. At most one block is in flight and one ready, so memory stays
    bounded. ``before`` runs right before a block is sent, after the one before it is
    stored. An error of the storage is raised here, and nothing after that block is sent.
    """
    pending: Sent | None = None
    try:
        for block, error in pairs:
            ready = prepare(block) if block is not None and error is None else None
            if ready is not None and pending is not None:
                ready.ahead()
            done = None
            if pending is not None:
                sent, pending = pending, None  # an error of its own is not waited for again
                done = sent.result()
            if block is not None:
                before(block)
                if ready is not None:
                    pending = ready.send()
                else:
                    if done is not None:
                        yield done
                    done = store(block)
            if done is not None:
                yield done
            if error is not None:
                raise error
        if pending is not None:
            sent, pending = pending, None
            yield sent.result()
    finally:
        if pending is not None:  # abandoned by the caller: still wait for what was sent
            with suppress(Exception):
                pending.result()


def _pair(item: tuple[Any, ...]) -> bool:
    """An ``(args, kwargs)`` item (``split_item``'s test, for a tuple)."""
    return len(item) == 2 and isinstance(item[0], (list, tuple)) and isinstance(item[1], Mapping)


def refs_of(results: Sequence[EnqueueResult], source: JobLookup) -> list[JobRef]:
    """A ``JobRef`` per stored job."""
    if isinstance(results, BlockResults) and results.all_created:
        return [JobRef(job_id, True, source) for job_id in results.ids]
    return [JobRef(r.id, r.created, source) for r in results]
