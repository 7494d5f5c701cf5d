"""Periodic schedules on SQLite: one row per schedule (definition, pause state, last tick)."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.clock import Clock
from conveyor.storage.schedule_records import ScheduleInfo
from conveyor.storage.sqlite.connection import Database, reads


class SqliteSchedules:
    """The schedule part of ``Storage`` and ``Inspector`` over one database."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def save_schedules(self, schedules: Sequence[ScheduleInfo]) -> None:
        """Create or update definitions; pause state, last ticks and creation time are kept."""
        now = self._clock.now()
        with self._db.write() as cur:
            cur.executemany(
                "INSERT INTO schedules (name, cron, tz, job_name, queue, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, tz = excluded.tz, "
                "job_name = excluded.job_name, queue = excluded.queue",
                [(s.name, s.cron, s.tz, s.job_name, s.queue, now) for s in schedules])

    @reads
    def schedule_pauses(self) -> dict[str, float | None]:
        """Paused schedules (None) and resumed ones (when)."""
        rows = self._db.read().execute(
            "SELECT name, paused, resumed_at FROM schedules "
            "WHERE paused = 1 OR resumed_at IS NOT NULL")
        return {n: None if p else r for n, p, r in rows}

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick."""
        with self._db.write() as cur:
            cur.execute("UPDATE schedules SET last_tick = MAX(COALESCE(last_tick, 0), ?) "
                        "WHERE name = ?", (tick, name))

    @reads
    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        rows = self._db.read().execute(
            "SELECT name, cron, tz, job_name, queue, paused, last_tick, resumed_at, created_at "
            "FROM schedules ORDER BY name").fetchall()
        return [ScheduleInfo(n, c, tz, j, q, bool(p), t, r, k)
                for n, c, tz, j, q, p, t, r, k in rows]

    def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; False if unknown."""
        with self._db.write() as cur:
            cur.execute("UPDATE schedules SET paused = 1 WHERE name = ?", (name,))
            return cur.rowcount > 0

    def resume_schedule(self, name: str) -> bool:
        """Resume a schedule, noting when; False if unknown."""
        with self._db.write() as cur:
            # Only a paused schedule gets a new resumed_at: resuming a running one must not
            # stop a restarted worker from catching up ticks it really missed.
            cur.execute("UPDATE schedules SET resumed_at = ?, paused = 0 "
                        "WHERE name = ? AND paused = 1", (self._clock.now(), name))
            if cur.rowcount:
                return True
            return cur.execute("SELECT 1 FROM schedules WHERE name = ?",
                               (name,)).fetchone() is not None
