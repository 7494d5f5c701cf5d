"""Batches on the client side: ``with app.batch(...) as batch:`` groups the jobs enqueued in it.

::

    with app.batch(description="import rows", on_success=notify) as batch:
        for row in rows:
            import_row.enqueue(row)
    print(batch.id, batch.enqueue_count)

Entering the block creates the batch (with its callbacks, each a job called with the batch id
as its only argument and a fixed id such as ``f"{batch_id}-success"``, so the storage enqueues
it once). Every enqueue in the block, in this thread or asyncio task, joins the batch; jobs
are sent to the storage 1,000 at a time, so a batch of a million jobs runs in bounded memory.
Leaving the block sends the rest and closes the batch: it completes when every job is done.

If the block raises, the jobs enqueued so far are sent anyway and the batch is still closed,
so they run and the callbacks fire for them (as in Sidekiq, jobs already pushed are not taken
back); the exception then propagates.

``app.batch(batch_id)`` re-opens an existing batch to add jobs, typically from one of its own
jobs (the batch cannot complete meanwhile, since that job is still active). Leaving a
re-opened block sends its jobs but does not close the batch again.

Nested batches are not a parent/child relation: an inner ``with app.batch()`` block is an
independent batch whose jobs belong to it alone, and the outer batch does not wait for it.
Other threads do not see the block (context variables do not cross threads): enqueue from the
thread that opened it, or re-open the batch by id in the other thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from contextvars import Token
from types import TracebackType
from typing import Any

from conveyor.client.client import Client, SpecBuffer
from conveyor.client.context import BatchScope, pop_batch, push_batch
from conveyor.client.draft import EnqueueDraft
from conveyor.client.options import make_options
from conveyor.client.refs import JobRef
from conveyor.client.registry import JobFunction
from conveyor.core.ids import new_id
from conveyor.core.job import BATCH_CALLBACK_EVENTS, BatchSpec, JobRecord, JobSpec, JobState
from conveyor.errors import BatchClosedError, BatchNotFound, ResultTimeout
from conveyor.storage import Backend

__all__ = ["WAIT_SLICE", "Batch", "Callback", "await_batch", "batch_status", "callback_spec",
           "wait_batch"]

_FAILURES_SHOWN = 10
# Between reads of a batch being waited for: a store that cannot wake the waiter is read
# from 5 ms backing off to 200 ms; one that can is read every 2 s besides, for what it
# cannot see (a wake-up lost with a dropped connection).
_READ_FIRST = 0.005
_READ_MAX = 0.2
_WOKEN_READS = 2.0
#: Seconds of one blocking wait in a thread for ``await_batch``: a task cancelled meanwhile
#: leaves its thread waiting this long at most.
WAIT_SLICE = 5.0

Callback = JobFunction | str | None
"""A batch callback: a job function, or the registered name of one."""


class Batch:
    """A batch being filled; use it as a context manager (see the module docstring).

    ``client`` is the app's client: the batch stores itself and its jobs through it.
    """

    def __init__(
        self,
        client: Client,
        batch_id: str | None = None,
        *,
        description: str | None = None,
        on_complete: Callback = None,
        on_success: Callback = None,
        on_death: Callback = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self._client = client
        self.reopened = batch_id is not None
        self._id = batch_id or new_id()
        self.description = description
        self.meta: dict[str, Any] = dict(meta or {})
        self._callbacks = {"complete": on_complete, "success": on_success, "death": on_death}
        if self.reopened and (description or meta or any(self._callbacks.values())):
            raise ValueError("description, meta and callbacks are set when a batch is created, "
                             "not when it is re-opened")
        self._buffer = SpecBuffer(client.store)
        self._direct = 0  # jobs of this batch the client stored in blocks (see reserve)
        self._token: Token[BatchScope | None] | None = None
        self._used = False

    def __repr__(self) -> str:
        return f"<Batch {self._id} jobs={self.enqueue_count}>"

    @property
    def id(self) -> str:
        """The batch id (jobs carry it as ``batch_id``; callbacks get it as their argument)."""
        return self._id

    @property
    def enqueue_count(self) -> int:
        """Jobs enqueued into this batch through this object (sent or still buffered)."""
        return self._buffer.added + self._direct

    def reserve(self, count: int) -> None:
        """Before the client stores ``count`` jobs of this batch itself (``enqueue_many``
        without client middleware): store the buffered ones first and count these."""
        self._buffer.flush()
        self._direct += count

    def add(self, spec: JobSpec, ref: JobRef | None = None) -> None:
        """Buffer a job of this batch (the client calls this for enqueues inside the block)."""
        self._buffer.add(spec, ref)

    def flush(self) -> int:
        """Send the buffered jobs now; returns how many were sent."""
        return self._buffer.flush()

    def status(self) -> dict[str, Any]:
        """``app.batch_status(batch.id)``."""
        return batch_status(self._client.storage, self._id)

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait until the batch completes (every job finished, the block left) and return
        ``status()``; ``ResultTimeout`` after ``timeout`` seconds (None: no limit). Call it
        after the ``with`` block: a batch still open cannot complete. See ``wait_batch``."""
        return wait_batch(self._client.storage, self._id, timeout)

    def __enter__(self) -> Batch:
        self._open()
        self._token = push_batch(self)
        return self

    def _open(self) -> None:
        if self._used:
            raise RuntimeError(f"a Batch object opens once; re-open with app.batch({self._id!r})")
        self._used = True
        if self.reopened:
            self._check_open()
        else:
            self._client.writer.create_batch(self._spec())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            pop_batch(self._token)
            self._token = None
        self._close()

    def _close(self) -> None:
        try:
            self._buffer.flush()
        finally:
            if not self.reopened:
                self._client.writer.close_batch(self._id)

    async def __aenter__(self) -> Batch:
        """``async with app.batch(...)``: as ``with``, its storage calls in a thread (the
        block's scope is this task's context: ``aenqueue`` inside joins the batch)."""
        await asyncio.to_thread(self._open)
        self._token = push_batch(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            pop_batch(self._token)
            self._token = None
        await asyncio.to_thread(self._close)

    def _check_open(self) -> None:
        status = self._client.storage.get_batch(self._id)
        if status is None:
            raise BatchNotFound(f"batch {self._id} does not exist (or was trimmed)")
        if status.complete:
            raise BatchClosedError(f"batch {self._id} has already completed; "
                                   "jobs can only be added while it is running")

    def _spec(self) -> BatchSpec:
        callbacks = {
            event: self._callback_spec(event, target)
            for event, target in self._callbacks.items()
            if target is not None
        }
        return BatchSpec(self._id, self.description, self.meta, callbacks)

    def _callback_spec(self, event: str, target: JobFunction | str) -> JobSpec:
        return callback_spec(self._client, self._id, event, target)


def callback_spec(client: Client, batch_id: str, event: str, target: JobFunction | str) -> JobSpec:
    """The job a batch (or workflow) enqueues at ``event``: ``target`` called with the batch
    id, under the fixed id ``f"{batch_id}-{event}"`` so that it is enqueued once."""
    assert event in BATCH_CALLBACK_EVENTS
    fn = client.registry.get(target) if isinstance(target, str) else target
    name = target if isinstance(target, str) else target.name
    draft = EnqueueDraft(
        name=name, args=[batch_id], kwargs={},
        options=fn.opts if fn is not None else make_options(), id=f"{batch_id}-{event}",
    )
    return client.build_spec(draft)


def batch_status(storage: Backend, batch_id: str) -> dict[str, Any]:
    """The batch's counters, progress and timings (``BatchStatus.as_dict``), plus
    ``failures``: the first 10 failed or dead jobs with their arguments and message.
    Raises ``BatchNotFound``."""
    status = storage.get_batch(batch_id)
    if status is None:
        raise BatchNotFound(f"batch {batch_id} does not exist (or was trimmed)")
    out = status.as_dict(storage.now())
    # Counters first: a batch without failures costs no job lookups at all.
    failing = status.counts.get(JobState.FAILED.value, 0) + status.counts.get(
        JobState.DEAD.value, 0)
    out["failures"] = [_failure(r) for r in _failures(storage, batch_id)] if failing else []
    return out


def wait_batch(storage: Backend, batch_id: str, timeout: float | None = None,
               what: str = "batch") -> dict[str, Any]:
    """Block until the batch completes and return its ``batch_status``; ``ResultTimeout``
    after ``timeout`` seconds (None: no limit), ``BatchNotFound`` if there is no such batch.

    Between reads it waits on the store's ``batch_finished``, which wakes it the moment the
    batch finishes (PostgreSQL: NOTIFY; Redis: PUBLISH; SQLite: a commit seen; memory: a
    condition), so a waiter costs the store almost nothing and hears of the end at once;
    where the store cannot wake it (Redis through Sentinel) reads back off from 5 to 200 ms.
    """
    limit = None if timeout is None else time.monotonic() + timeout
    with storage.batch_finished(batch_id) as waiter:  # before the first read: nothing missed
        first = _WOKEN_READS if waiter.notifies else _READ_FIRST
        delay = first
        while True:
            status = storage.get_batch(batch_id)
            if status is None:
                raise BatchNotFound(f"{what} {batch_id} does not exist (or was trimmed)")
            if status.complete:
                return batch_status(storage, batch_id)
            pause = delay if limit is None else min(delay, limit - time.monotonic())
            if pause <= 0:
                raise ResultTimeout(f"{what} {batch_id} did not complete within {timeout} s")
            woken = waiter.wait(pause)
            delay = first if woken or waiter.notifies else min(delay * 2, _READ_MAX)


async def await_batch(storage: Backend, batch_id: str,
                      timeout: float | None = None) -> dict[str, Any]:
    """``wait_batch`` for asyncio code: the blocking wait in a thread, in slices of
    ``WAIT_SLICE`` seconds, so that a cancelled task leaves no thread waiting long."""
    limit = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if limit is None else max(limit - time.monotonic(), 0.0)
        part = WAIT_SLICE if left is None else min(left, WAIT_SLICE)
        try:
            return await asyncio.to_thread(wait_batch, storage, batch_id, part)
        except ResultTimeout:
            if left is not None and left <= WAIT_SLICE:
                raise ResultTimeout(f"batch {batch_id} did not complete within "
                                    f"{timeout} s") from None


def _failures(storage: Backend, batch_id: str) -> list[JobRecord]:
    found: list[JobRecord] = []
    for state in (JobState.FAILED, JobState.DEAD):
        found += storage.list_jobs(state=state, batch_id=batch_id, limit=_FAILURES_SHOWN)
    found.sort(key=lambda r: (r.finished_at or 0.0, r.id))
    return found[:_FAILURES_SHOWN]


def _failure(record: JobRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "state": record.state.value,
        "args": record.args,
        "kwargs": record.kwargs,
        "message": record.message,
        "errors": record.errors,
        "finished_at": record.finished_at,
    }
