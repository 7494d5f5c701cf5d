"""Periodic schedules on SQLite: one row per schedule (definition, paused flag, last tick)."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.job import ScheduleInfo
from conveyor.storage.sqlite.connection import Database


class SqliteSchedules:
    """The schedule part of ``Storage`` and ``Inspector`` over one database."""

    _db: Database

    def save_schedules(self, schedules: Sequence[ScheduleInfo]) -> None:
        """Create or update definitions; paused flags and last ticks are kept."""
        with self._db.write() as cur:
            cur.executemany(
                "INSERT INTO schedules (name, cron, tz, job_name, queue) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, tz = excluded.tz, "
                "job_name = excluded.job_name, queue = excluded.queue",
                [(s.name, s.cron, s.tz, s.job_name, s.queue) for s in schedules])

    def paused_schedules(self) -> set[str]:
        """Names of paused schedules."""
        rows = self._db.read().execute("SELECT name FROM schedules WHERE paused = 1")
        return {r[0] for r in rows}

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick."""
        with self._db.write() as cur:
            cur.execute("UPDATE schedules SET last_tick = MAX(COALESCE(last_tick, 0), ?) "
                        "WHERE name = ?", (tick, name))

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        rows = self._db.read().execute(
            "SELECT name, cron, tz, job_name, queue, paused, last_tick FROM schedules "
            "ORDER BY name").fetchall()
        return [ScheduleInfo(n, c, tz, j, q, bool(p), t) for n, c, tz, j, q, p, t in rows]

    def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; False if unknown."""
        return self._set_schedule_paused(name, 1)

    def resume_schedule(self, name: str) -> bool:
        """Resume a schedule; False if unknown."""
        return self._set_schedule_paused(name, 0)

    def _set_schedule_paused(self, name: str, paused: int) -> bool:
        with self._db.write() as cur:
            cur.execute("UPDATE schedules SET paused = ? WHERE name = ?", (paused, name))
            return cur.rowcount > 0
