"""``SpecBuffer``: built specs collected and handed to the storage ``CHUNK_SIZE`` at a time.

What ``Client.push_many`` and a ``with app.batch()`` block store through: each ``JobRef``
handed out before the flush is set at the flush to the id and ``created`` flag the storage
reports.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from conveyor.client.refs import JobRef
from conveyor.core.job import EnqueueResult, JobSpec

__all__ = ["CHUNK_SIZE", "SpecBuffer"]

CHUNK_SIZE = 1000
"""Specs per storage call in bulk enqueues: bounds memory and stays far below Lua's unpack limit."""


class SpecBuffer:
    """Specs collected and handed to the storage ``size`` at a time (bulk and batch enqueues).

    A ``JobRef`` given with a spec is updated in place at the flush, so it ends up with the id
    the storage reports (an existing unique job's id) and the right ``created`` flag.
    """

    def __init__(
        self, store: Callable[[Sequence[JobSpec]], list[EnqueueResult]], size: int = CHUNK_SIZE
    ) -> None:
        self._store = store
        self._size = size
        self._items: list[tuple[JobSpec, JobRef | None]] = []
        self._lock = threading.RLock()
        self.added = 0
        self.sent = 0

    def add(self, spec: JobSpec, ref: JobRef | None = None) -> None:
        """Buffer one spec; flushes when the buffer is full."""
        with self._lock:
            self._items.append((spec, ref))
            self.added += 1
            if len(self._items) >= self._size:
                self.flush()

    def flush(self) -> int:
        """Store every buffered spec now; returns how many were sent."""
        with self._lock:
            items, self._items = self._items, []
            if not items:
                return 0
            results = self._store([spec for spec, _ in items])
            for (_, ref), result in zip(items, results, strict=True):
                if ref is not None:
                    ref.id, ref.created = result.id, result.created
            self.sent += len(items)
            return len(items)
