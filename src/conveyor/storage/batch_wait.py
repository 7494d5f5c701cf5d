"""Waiting for a batch to finish: what ``Storage.batch_finished`` yields, and the waiter of a
store that cannot tell (it only sleeps).

``Batch.wait``, ``Workflow.wait`` and ``app.wait_batch`` read the batch, and between reads
wait on the store's ``BatchWaiter``: PostgreSQL LISTENs for the NOTIFY its ``batches`` trigger
sends as a batch finishes, Redis subscribes to the channel ``batch.lua`` publishes on, SQLite
watches for other connections' commits (``PRAGMA data_version``), the memory store waits on a
condition. A waiter that was woken makes the caller read again at once; one that ``notifies``
lets the caller read seldom otherwise (a missed wake-up, or an end no finish marked: a trim).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["BatchWaiter", "sleeping"]


@dataclass(frozen=True, slots=True)
class BatchWaiter:
    """``wait(seconds)`` returns True when woken because the batch may have finished (a
    spurious wake-up is allowed: the caller reads again), False once the seconds passed;
    ``notifies`` says whether the store wakes it at all (else a caller keeps its reads
    frequent)."""

    wait: Callable[[float], bool]
    notifies: bool = False


def _sleep(seconds: float) -> bool:
    time.sleep(max(seconds, 0.0))
    return False


@contextmanager
def sleeping() -> Iterator[BatchWaiter]:
    """The waiter of a store that cannot notify (Redis through Sentinel): it sleeps."""
    yield BatchWaiter(_sleep)
