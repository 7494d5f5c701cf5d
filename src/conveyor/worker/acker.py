"""Acker: collects finished jobs' ``Ack``s and writes them to storage in batches.

One storage call per batch is what makes high throughput possible (DESIGN §4). The acker
flushes as soon as it has something and the previous flush is done ("group commit"): under
load batches grow by themselves, when idle a single ack is written at once, so latency stays
low. Acks that fail to write (storage outage) are kept and retried; their leases stay in the
heartbeat until they are written, so nothing is recovered twice meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from conveyor.clock import Clock
from conveyor.job import Ack
from conveyor.storage.base import Storage
from conveyor.worker.config import WorkerConfig

__all__ = ["Acker", "NoLock", "WriteLock"]

log = logging.getLogger("conveyor.worker")

_RETRY_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)


class WriteLock(Protocol):
    """What the fetcher and acker hold around storage writes (``threading.Lock`` or none)."""

    def __enter__(self) -> Any: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> Any: ...


class NoLock:
    """A lock that never blocks, for storages that serve concurrent writers well."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> None:
        return None


class Acker:
    """Batches ``Ack``s; ``tick()`` writes one batch, ``start()`` runs a flushing thread."""

    name = "acker"

    def __init__(
        self, storage: Storage, clock: Clock, config: WorkerConfig,
        write_lock: WriteLock | None = None,
    ) -> None:
        self.storage = storage
        self.write_lock: WriteLock = write_lock or NoLock()  # shared with the fetcher
        self.clock = clock
        self.config = config
        self._pending: list[Ack] = []
        self._writing: list[Ack] = []
        self._cond = threading.Condition(threading.Lock())
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failures = 0
        self.refused = 0  # acks the storage refused: the lease had moved on (fencing)
        self.written = 0

    def add(self, ack: Ack) -> None:
        """Queue an ack for the next batch."""
        with self._cond:
            self._pending.append(ack)
            if len(self._pending) == 1:
                self._cond.notify()

    def leases(self) -> dict[str, str]:
        """Job id → token of acks not yet written: their leases must still be extended."""
        with self._cond:
            return {a.job_id: a.token for a in (*self._writing, *self._pending)}

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._writing)

    def tick(self) -> int:
        """Write one batch of pending acks; returns how many were written (0 on failure)."""
        with self._cond:
            if not self._writing:
                batch = self._pending[: self.config.ack_batch]
                del self._pending[: len(batch)]
                self._writing = batch
            batch = self._writing
        if not batch:
            return 0
        try:
            with self.write_lock:
                results = self.storage.ack(batch)
        except Exception:
            self._failures += 1
            log.exception("writing %d ack(s) failed; keeping them and retrying", len(batch))
            return 0
        self._failures = 0
        refused = len(results) - sum(1 for ok in results if ok)
        if refused:
            self.refused += refused
            log.warning("%d ack(s) refused: the job's lease had passed to another worker", refused)
        with self._cond:
            self._writing = []
        self.written += len(batch)
        return len(batch)

    def flush(self, timeout: float = 10.0) -> bool:
        """Write everything pending now, in this thread; True when nothing is left."""
        deadline = time.monotonic() + timeout
        while len(self) and time.monotonic() < deadline:
            if not self.tick():
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return not len(self)

    def start(self) -> None:
        """Run the flushing thread."""
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="conveyor-acker", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, then write whatever is left."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        self.flush(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._writing and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
            if not self.tick() and self._failures:
                time.sleep(_RETRY_DELAYS[min(self._failures, len(_RETRY_DELAYS)) - 1])
