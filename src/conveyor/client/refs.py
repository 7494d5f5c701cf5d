"""``JobRef``: the handle to a stored job that every enqueue returns."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from conveyor.core.job import JobRecord, JobState
from conveyor.core.reraise import failure
from conveyor.errors import JobNotFound, ResultTimeout
from conveyor.storage.aio import Waiter

__all__ = ["JobLookup", "JobRef"]

_POLL_FIRST = 0.005
_POLL_MAX = 0.2
_WOKEN_MAX = 5.0  # between reads when the store wakes waiters (for what it cannot see)


class JobLookup(Protocol):
    """Where a ``JobRef`` reads its job (``Conveyor`` and ``Client`` are two)."""

    def get_job(self, job_id: str) -> JobRecord | None:
        """The stored job with its events, or None."""
        ...

    async def aget_job(self, job_id: str) -> JobRecord | None:
        """``get_job`` for asyncio code."""
        ...

    def afinished(self, job_id: str, queue: str) -> AbstractAsyncContextManager[Waiter]:
        """Wake-ups when the job ends (``Storage.afinished``)."""
        ...

    def result_of(self, record: JobRecord) -> Any:
        """The value of a succeeded job's stored result (opened, typed)."""
        ...


class JobRef:
    """A handle to a stored job: its id, and ways to read its state and wait for its result.

    ``created`` is False when a unique job already existed (``id`` is then that job's id).
    Refs returned inside a ``with app.batch()`` block are provisional until the batch flushes
    its buffer (every 1,000 jobs and at the end of the block): ``status()`` is None until then.
    """

    __slots__ = ("_source", "created", "id")

    def __init__(self, job_id: str, created: bool = True, source: JobLookup | None = None) -> None:
        self.id = job_id
        self.created = created
        self._source = source

    def __repr__(self) -> str:
        return f"<JobRef {self.id}{'' if self.created else ' (existing)'}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobRef) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def bind(self, source: JobLookup) -> None:
        """Read the job through ``source`` from now on (a ref made before its app was
        known: a workflow's nodes)."""
        self._source = source

    def status(self) -> JobRecord | None:
        """The job's record with its state and events, or None if it is not stored."""
        if self._source is None:
            raise RuntimeError("this JobRef is not bound to an app; use app.get_job(ref.id)")
        return self._source.get_job(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job to finish and return its JSON-decoded result.

        When it ended failed, dead or cancelled, raises the job's own exception if an error
        ended it and its class can be rebuilt here (``conveyor.core.reraise``; it derives from
        ``JobFailed`` too), else ``JobFailed``. Raises ``ResultTimeout`` after ``timeout``
        seconds (None waits forever) and ``JobNotFound`` if it is not stored.
        Polls with a backoff from 5 ms to 200 ms.
        """
        waits = self._waits(timeout)
        try:
            while True:
                time.sleep(next(waits))
        except StopIteration as finished:
            return finished.value

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result`` for asyncio code: reads through the storage's asyncio path (the loop
        never waits on it); between reads it waits to be woken when the job ends (Redis,
        PostgreSQL: ``Storage.afinished``), else a backoff of sleeps."""
        limit = None if timeout is None else time.monotonic() + timeout
        record = await self._record()
        if record.state.terminal:
            return await _aoutcome(record, self._lookup())
        async with self._lookup().afinished(self.id, record.queue) as waiter:
            # A store that wakes us leaves a read now and then only for what it cannot see
            # (an end no ack made: a cancel, an expiry); else reads back off from 5 ms.
            first = _WOKEN_MAX if waiter.notifies else _POLL_FIRST
            delay = first
            while True:
                record = await self._record()
                if record.state.terminal:
                    return await _aoutcome(record, self._lookup())
                woken = await waiter.wait(self._pause(limit, delay, timeout))
                delay = first if woken or waiter.notifies else min(delay * 2, _POLL_MAX)

    async def _record(self) -> JobRecord:
        record = await self.astatus()
        if record is None:
            raise JobNotFound(f"job {self.id} is not stored (never enqueued, or trimmed)")
        return record

    def _lookup(self) -> JobLookup:
        if self._source is None:
            raise RuntimeError("this JobRef is not bound to an app; use app.aget_job(ref.id)")
        return self._source

    async def astatus(self) -> JobRecord | None:
        """``status`` for asyncio code."""
        if self._source is None:
            raise RuntimeError("this JobRef is not bound to an app; use app.aget_job(ref.id)")
        return await self._source.aget_job(self.id)

    def _waits(self, timeout: float | None) -> Generator[float, None, Any]:
        """Yields each pause between reads; returns the outcome once the job is finished."""
        limit = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_FIRST
        while True:
            record = self.status()
            if record is None:
                raise JobNotFound(f"job {self.id} is not stored (never enqueued, or trimmed)")
            if record.state.terminal:
                return _outcome(record, self._lookup())
            yield self._pause(limit, delay, timeout)
            delay = min(delay * 2, _POLL_MAX)

    def _pause(self, limit: float | None, delay: float, timeout: float | None) -> float:
        """The next sleep: the backoff step, cut short at the limit; ``ResultTimeout`` past it."""
        if limit is None:
            return delay
        left = limit - time.monotonic()
        if left <= 0:
            raise ResultTimeout(f"job {self.id} did not finish within {timeout} s")
        return min(delay, left)


async def _aoutcome(record: JobRecord, source: JobLookup) -> Any:
    """``_outcome`` for asyncio code: a result kept by reference is read in a thread (a blob
    store's read blocks; docs/job-data.md)."""
    if record.result is not None and '"r":' in record.result:
        return await asyncio.to_thread(_outcome, record, source)
    return _outcome(record, source)


def _outcome(record: JobRecord, source: JobLookup) -> Any:
    if record.state is JobState.SUCCEEDED:
        return source.result_of(record)
    raise failure(record)
