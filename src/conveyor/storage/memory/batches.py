"""Batch bookkeeping for the memory backend: live counters and exactly-once callbacks.

Counters per state are moved on every job transition, so reading a batch is O(1) and never
scans its jobs. The storage calls ``BatchBook`` under its own lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from conveyor.core.job import TERMINAL_STATES, BatchSpec, JobSpec, JobState
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.batch_wait import BatchWaiter


@dataclass(slots=True, eq=False)
class _Batch:
    spec: BatchSpec
    created_at: float
    seq: int
    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    closed: bool = False
    cancelled: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    fired: list[str] = field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(self.counts.get(s.value, 0) for s in TERMINAL_STATES)

    def bump(self, state: JobState, by: int) -> None:
        self.counts[state.value] = self.counts.get(state.value, 0) + by


class BatchBook:
    """Every batch of one memory storage, with the callbacks each is due to enqueue."""

    def __init__(self) -> None:
        self._batches: dict[str, _Batch] = {}
        self._seq = 0
        # Batches finished so far, behind a condition of its own (taken under the storage's
        # lock, never the other way round): what ``waiter`` wakes on.
        self._finishing = threading.Condition()
        self._finished = 0

    @contextmanager
    def waiter(self) -> Iterator[BatchWaiter]:
        """Wake-ups as any batch finishes from now on (``Storage.batch_finished``)."""
        with self._finishing:
            seen = self._finished

        def wait(timeout: float) -> bool:
            nonlocal seen
            with self._finishing:
                woken = self._finishing.wait_for(lambda: self._finished != seen,
                                                 max(timeout, 0.0))
                seen = self._finished
            return woken

        yield BatchWaiter(wait, notifies=True)

    def create(self, spec: BatchSpec, now: float) -> None:
        """Create an open batch; creating an existing id again changes nothing."""
        if spec.id not in self._batches:
            self._seq += 1
            self._batches[spec.id] = _Batch(spec=spec, created_at=now, seq=self._seq)

    def check_open(self, batch_id: str) -> None:
        """Raise unless jobs may still join ``batch_id``."""
        batch = self._batches.get(batch_id)
        if batch is None:
            raise BatchNotFound(f"no batch with id {batch_id!r}")
        if batch.closed and batch.done >= batch.total:
            raise BatchClosedError(f"batch {batch_id!r} has finished; it takes no more jobs")

    def joined(self, batch_id: str, state: JobState) -> None:
        """A new job in ``state`` joined the batch."""
        batch = self._batches[batch_id]
        batch.total += 1
        batch.bump(state, 1)

    def moved(self, batch_id: str, old: JobState, new: JobState, now: float) -> list[JobSpec]:
        """A job of the batch went from ``old`` to ``new``; returns callbacks now due."""
        batch = self._batches.get(batch_id)
        if batch is None:  # trimmed away while its job lived on
            return []
        batch.bump(old, -1)
        batch.bump(new, 1)
        if new is JobState.ACTIVE and batch.started_at is None:
            batch.started_at = now
        due = []
        if new is JobState.DEAD:
            due += self._fire(batch, "death")
        return due + self._check_complete(batch, now)

    def left(self, batch_id: str, state: JobState, now: float) -> list[JobSpec]:
        """A job of the batch was deleted; returns callbacks now due."""
        batch = self._batches.get(batch_id)
        if batch is None:
            return []
        batch.total -= 1
        batch.bump(state, -1)
        return self._check_complete(batch, now)

    def close(self, batch_id: str, now: float) -> list[JobSpec]:
        """Mark the batch fully enqueued; returns callbacks now due."""
        batch = self._batch(batch_id)
        batch.closed = True
        return self._check_complete(batch, now)

    def mark_cancelled(self, batch_id: str) -> None:
        """Flag the batch as cancelled (its jobs are cancelled by the storage)."""
        self._batch(batch_id).cancelled = True

    def cancelled(self, batch_id: str) -> bool:
        """True when the batch exists and was cancelled."""
        batch = self._batches.get(batch_id)
        return batch is not None and batch.cancelled

    def status(self, batch_id: str) -> BatchStatus | None:
        """A snapshot of the batch, or None."""
        batch = self._batches.get(batch_id)
        return None if batch is None else _snapshot(batch)

    def page(self, offset: int, limit: int, kind: str | None = None) -> list[BatchStatus]:
        """Batches newest first (of one ``kind`` when given)."""
        ordered = sorted((b for b in self._batches.values() if kind in (None, b.spec.kind)),
                         key=lambda b: (b.created_at, b.seq), reverse=True)
        return [_snapshot(b) for b in ordered[offset : offset + limit]]

    def trim(self, before: float) -> None:
        """Forget batches that completed before ``before``."""
        for batch_id, batch in list(self._batches.items()):
            finished = batch.finished_at
            if finished is not None and finished < before and batch.done >= batch.total:
                del self._batches[batch_id]

    def _batch(self, batch_id: str) -> _Batch:
        batch = self._batches.get(batch_id)
        if batch is None:
            raise BatchNotFound(f"no batch with id {batch_id!r}")
        return batch

    def _check_complete(self, batch: _Batch, now: float) -> list[JobSpec]:
        if not batch.closed or batch.done < batch.total:
            batch.finished_at = None  # a job retried by hand re-opens a finished batch
            return []
        if batch.finished_at is None:
            batch.finished_at = now
            with self._finishing:
                self._finished += 1
                self._finishing.notify_all()
        due = self._fire(batch, "complete")
        if batch.counts.get(JobState.SUCCEEDED.value, 0) >= batch.total:
            # Success may come later than completion: a dead job retried by hand can succeed.
            due += self._fire(batch, "success")
        return due

    @staticmethod
    def _fire(batch: _Batch, moment: str) -> list[JobSpec]:
        spec = batch.spec.callbacks.get(moment)
        if spec is None or moment in batch.fired:
            return []
        batch.fired.append(moment)
        return [spec]


def _snapshot(batch: _Batch) -> BatchStatus:
    return BatchStatus(
        id=batch.spec.id,
        description=batch.spec.description,
        meta=dict(batch.spec.meta),
        created_at=batch.created_at,
        total=batch.total,
        counts={k: v for k, v in batch.counts.items() if v},
        closed=batch.closed,
        cancelled=batch.cancelled,
        started_at=batch.started_at,
        finished_at=batch.finished_at,
        callbacks_fired=tuple(batch.fired),
        kind=batch.spec.kind,
    )
