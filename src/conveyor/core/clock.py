"""Time as a dependency, so tests drive leases, retries and schedules without sleeping."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock seconds since the epoch."""

    def now(self) -> float:
        """Current time in seconds since the epoch."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> float:
        """Current time in seconds since the epoch."""
        return time.time()


class FakeClock:
    """A clock that only moves when told to; thread-safe."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        """The frozen current time."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward and return the new time."""
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, when: float) -> None:
        """Jump to an absolute time."""
        with self._lock:
            self._now = when


SYSTEM_CLOCK = SystemClock()
