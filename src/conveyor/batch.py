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

from collections.abc import Mapping
from contextvars import Token
from types import TracebackType
from typing import TYPE_CHECKING, Any

from conveyor.client import EnqueueDraft, JobRef, SpecBuffer, build_spec
from conveyor.context import BatchScope, pop_batch, push_batch
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.ids import new_id
from conveyor.job import BATCH_CALLBACK_EVENTS, BatchSpec, JobSpec
from conveyor.registry import JobFunction, make_options

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["Batch", "Callback"]

Callback = JobFunction | str | None
"""A batch callback: a job function, or the registered name of one."""


class Batch:
    """A batch being filled; use it as a context manager (see the module docstring)."""

    def __init__(
        self,
        app: Conveyor,
        batch_id: str | None = None,
        *,
        description: str | None = None,
        on_complete: Callback = None,
        on_success: Callback = None,
        on_death: Callback = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.app = app
        self.reopened = batch_id is not None
        self._id = batch_id or new_id()
        self.description = description
        self.meta: dict[str, Any] = dict(meta or {})
        self._callbacks = {"complete": on_complete, "success": on_success, "death": on_death}
        if self.reopened and (description or meta or any(self._callbacks.values())):
            raise ValueError("description, meta and callbacks are set when a batch is created, "
                             "not when it is re-opened")
        self._buffer = SpecBuffer(lambda specs: app.storage.enqueue(specs))
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
        return self._buffer.added

    def add(self, spec: JobSpec, ref: JobRef | None = None) -> None:
        """Buffer a job of this batch (the client calls this for enqueues inside the block)."""
        self._buffer.add(spec, ref)

    def flush(self) -> int:
        """Send the buffered jobs now; returns how many were sent."""
        return self._buffer.flush()

    def status(self) -> dict[str, Any]:
        """``app.batch_status(batch.id)``."""
        return self.app.batch_status(self._id)

    def __enter__(self) -> Batch:
        if self._used:
            raise RuntimeError(f"a Batch object opens once; re-open with app.batch({self._id!r})")
        self._used = True
        if self.reopened:
            self._check_open()
        else:
            self.app.storage.create_batch(self._spec())
        self._token = push_batch(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            pop_batch(self._token)
            self._token = None
        try:
            self._buffer.flush()
        finally:
            if not self.reopened:
                self.app.storage.close_batch(self._id)

    async def __aenter__(self) -> Batch:
        """``async with app.batch(...)``: the same as ``with`` (storage calls are short)."""
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def _check_open(self) -> None:
        status = self.app.storage.get_batch(self._id)
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
        assert event in BATCH_CALLBACK_EVENTS
        fn = self.app.registry.get(target) if isinstance(target, str) else target
        name = target if isinstance(target, str) else target.name
        draft = EnqueueDraft(
            name=name, args=[self._id], kwargs={},
            options=fn.opts if fn is not None else make_options(), id=f"{self._id}-{event}",
        )
        return build_spec(draft, self.app.clock.now(), self.app.max_payload)
