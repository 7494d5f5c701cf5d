"""Poller: moves scheduled and retrying jobs whose time has come to pending."""

from __future__ import annotations

import heapq
import random
import threading
import time

from conveyor.core.clock import Clock
from conveyor.storage.base import Storage
from conveyor.worker.component import PeriodicComponent
from conveyor.worker.config import WorkerConfig

__all__ = ["Poller"]


class Poller(PeriodicComponent):
    """Calls ``Storage.promote_due`` at a randomised interval (0.5 to 1 s by default), so many
    workers started together do not all hit the storage at the same instant [sidekiq poller].

    A tick that promoted a full page goes again at once, so a backlog drains quickly. A
    durable job this worker suspended (docs/durable.md) says when it is due (``expect``):
    the poller ticks then rather than up to an interval late, so a short sleep wakes on time.
    """

    name = "poller"
    page = 1000

    def __init__(self, storage: Storage, clock: Clock, config: WorkerConfig) -> None:
        super().__init__(storage, clock, config)
        self._due: list[float] = []  # wake times expected (a heap), on the storage's clock
        self._lock = threading.Lock()  # expect() comes from the job and acker threads
        self._woken = threading.Event()

    def expect(self, at: float) -> None:
        """A job is due at ``at``: tick then."""
        with self._lock:
            heapq.heappush(self._due, at)
            first = self._due[0] == at
        if first:
            self._woken.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop; a rest in progress ends at once."""
        self._stopping.set()
        self._woken.set()
        super().stop(timeout)

    def _earliest(self) -> float | None:
        with self._lock:
            return self._due[0] if self._due else None

    def rest(self, seconds: float) -> None:
        """Wait ``seconds``, or until the earliest expected wake time, or a stop."""
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            earliest = self._earliest()
            if earliest is not None:
                left = min(left, earliest - self.clock.now())
            if left <= 0:
                break
            self._woken.wait(left)
            self._woken.clear()
        now = self.clock.now()
        with self._lock:  # the tick that follows promotes them
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)

    def tick(self) -> None:
        """Promote every due job, a page at a time."""
        while self.storage.promote_due(self.page) >= self.page and not self._stopping.is_set():
            pass

    def interval(self) -> float:
        """A random interval within ``config.poll_interval``."""
        low, high = self.config.poll_interval
        return random.uniform(low, high)
