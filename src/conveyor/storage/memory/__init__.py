"""The in-process backend: ``memory://`` (a fresh store) and ``memory://NAME`` (shared by name).

A faithful reference implementation of ``Storage`` and ``Inspector``, offered to users for
their tests: the same states, events, fencing, batches and flow control as SQLite and Redis,
held in Python dicts under one lock. Data lives as long as the process.

The same shape as the other backends: ``storage`` (the hot path and ``open_memory``),
``inspect`` (the inspector), ``batches`` (batch counters and callbacks), ``flow`` (pausing;
unique, concurrency, order and rate limits), ``schedules`` (periodic schedules), ``outbox``,
and its own ``state`` (indexes and the one place jobs move; every part is handed it),
``acks``, ``groups`` (aggregation) and ``totals`` (outcome counters).
"""

from conveyor.storage.memory.storage import MemoryStorage, open_memory

__all__ = ["MemoryStorage", "open_memory"]
