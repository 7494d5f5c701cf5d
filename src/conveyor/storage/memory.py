"""The in-process backend: ``memory://`` (a fresh store) and ``memory://NAME`` (shared by name).

A faithful reference implementation of ``Storage`` and ``Inspector``, offered to users for
their tests: the same states, events, fencing, batches and flow control as SQLite and Redis,
held in Python dicts under one lock. Data lives as long as the process.

Split for size: ``memory_state`` (indexes and the one place jobs move), ``memory_core`` (the
hot path), ``memory_inspect`` (the inspector), ``memory_batches`` (batch counters and
callbacks), ``memory_flow`` (unique, concurrency, order and rate limits), ``memory_schedules``
(periodic schedules).
"""

from __future__ import annotations

import threading

from conveyor.clock import SYSTEM_CLOCK, Clock
from conveyor.errors import StorageURLError
from conveyor.storage.memory_inspect import MemoryInspector
from conveyor.storage.memory_schedules import MemorySchedules

__all__ = ["MemoryStorage", "open_memory"]


class MemoryStorage(MemoryInspector, MemorySchedules):
    """A ``Storage`` and ``Inspector`` held in process memory; thread-safe."""

    def __init__(self, url: str, clock: Clock) -> None:
        MemoryInspector.__init__(self, url, clock)
        MemorySchedules.__init__(self)


_named: dict[str, MemoryStorage] = {}
_named_lock = threading.Lock()


def open_memory(url: str, clock: Clock | None = None) -> MemoryStorage:
    """Open ``memory://`` (always a new, empty store) or ``memory://NAME``.

    Every ``memory://NAME`` opened in this process with the same NAME returns the same store,
    so an app and an in-process worker share it; the first opener's clock is kept.
    """
    scheme, sep, name = url.partition("://")
    if scheme.lower() != "memory" or not sep:
        raise StorageURLError(f"not a memory storage URL: {url!r} (expected memory://[NAME])")
    name = name.strip("/")
    if any(c in name for c in "/?#"):
        raise StorageURLError(f"memory storage name {name!r} may not contain '/', '?' or '#'")
    if not name:
        return MemoryStorage(url, clock or SYSTEM_CLOCK)
    with _named_lock:
        store = _named.get(name)
        if store is None:
            store = _named[name] = MemoryStorage(url, clock or SYSTEM_CLOCK)
        return store
