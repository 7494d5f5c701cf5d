"""Periodic schedules of the memory backend: records, last ticks and the audit trail under one
lock (the rules of each change are ``storage/schedule_edits.py``'s)."""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable

from conveyor.storage.schedule_edits import CHANGES_KEPT, ScheduleTxn, T, newest
from conveyor.storage.schedule_records import ScheduleChange, ScheduleInfo


class _Step:
    """One schedule's step, run under ``MemorySchedules``' lock."""

    def __init__(self, owner: MemorySchedules, name: str) -> None:
        self.owner = owner
        self.name = name

    def read(self) -> ScheduleInfo | None:
        return self.owner._schedules.get(self.name)

    def write(self, info: ScheduleInfo) -> None:
        old = self.owner._schedules.get(self.name)
        self.owner._schedules[self.name] = dataclasses.replace(
            info, last_tick=None if old is None else old.last_tick)

    def delete(self) -> None:
        self.owner._schedules.pop(self.name, None)

    def note(self, change: ScheduleChange) -> None:
        self.owner._changes.appendleft(change)


class MemorySchedules:
    """The schedules themselves, under their own lock: the steps ``ScheduleEdits`` runs its
    rules in, the ticks and the audit trail."""

    def __init__(self) -> None:
        self._schedule_lock = threading.Lock()
        self._schedules: dict[str, ScheduleInfo] = {}
        self._changes: deque[ScheduleChange] = deque(maxlen=CHANGES_KEPT)

    def apply(self, name: str, rule: Callable[[ScheduleTxn], T]) -> T:
        """Run ``rule`` over schedule ``name`` under the lock (``ScheduleSteps``)."""
        with self._schedule_lock:
            return rule(_Step(self, name))

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick."""
        with self._schedule_lock:
            s = self._schedules.get(name)
            if s is not None and (s.last_tick is None or tick > s.last_tick):
                self._schedules[name] = dataclasses.replace(s, last_tick=tick)

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        with self._schedule_lock:
            return [self._schedules[n] for n in sorted(self._schedules)]

    def schedule_changes(self, name: str | None = None, limit: int = 50
                         ) -> list[ScheduleChange]:
        """The audit trail, newest first."""
        with self._schedule_lock:
            changes = list(self._changes)
        return newest(iter(changes), name, limit)
