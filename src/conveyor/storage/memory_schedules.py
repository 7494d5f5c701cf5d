"""Periodic schedules of the memory backend: definitions, paused flags and last ticks."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from conveyor.job import ScheduleInfo


class MemorySchedules:
    """The schedule part of ``Storage`` and ``Inspector``, under its own lock."""

    def __init__(self) -> None:
        self._schedule_lock = threading.Lock()
        self._schedules: dict[str, ScheduleInfo] = {}

    def save_schedules(self, schedules: Sequence[ScheduleInfo]) -> None:
        """Create or update definitions; paused flags and last ticks are kept."""
        with self._schedule_lock:
            for s in schedules:
                old = self._schedules.get(s.name)
                self._schedules[s.name] = dataclasses.replace(
                    s, paused=old.paused if old else False,
                    last_tick=old.last_tick if old else None)

    def paused_schedules(self) -> set[str]:
        """Names of paused schedules."""
        with self._schedule_lock:
            return {n for n, s in self._schedules.items() if s.paused}

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
            self._schedules[name] = dataclasses.replace(s, paused=paused)
            return True
