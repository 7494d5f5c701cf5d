"""Periodic schedules of the memory backend: definitions, pause state and last ticks."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from conveyor.clock import Clock
from conveyor.storage.schedule_records import ScheduleInfo


class MemorySchedules:
    """The schedule part of ``Storage`` and ``Inspector``, under its own lock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._schedule_lock = threading.Lock()
        self._schedules: dict[str, ScheduleInfo] = {}

    def save_schedules(self, schedules: Sequence[ScheduleInfo]) -> None:
        """Create or update definitions; pause state, last ticks and creation time are kept."""
        with self._schedule_lock:
            for s in schedules:
                old = self._schedules.get(s.name)
                self._schedules[s.name] = dataclasses.replace(
                    s, paused=False, last_tick=None, resumed_at=None,
                    created_at=self._clock.now()) if old is None else dataclasses.replace(
                    s, paused=old.paused, last_tick=old.last_tick, resumed_at=old.resumed_at,
                    created_at=old.created_at)

    def schedule_pauses(self) -> dict[str, float | None]:
        """Paused schedules (None) and resumed ones (when)."""
        with self._schedule_lock:
            return {n: None if s.paused else s.resumed_at for n, s in self._schedules.items()
                    if s.paused or s.resumed_at is not None}

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

    def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; False if unknown."""
        return self._set_paused(name, True)

    def resume_schedule(self, name: str) -> bool:
        """Resume a schedule; False if unknown."""
        return self._set_paused(name, False)

    def _set_paused(self, name: str, paused: bool) -> bool:
        with self._schedule_lock:
            s = self._schedules.get(name)
            if s is None:
                return False
            if s.paused != paused:  # resuming a running schedule must not move resumed_at
                resumed_at = s.resumed_at if paused else self._clock.now()
                self._schedules[name] = dataclasses.replace(s, paused=paused,
                                                            resumed_at=resumed_at)
            return True
