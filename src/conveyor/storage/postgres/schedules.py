"""Periodic schedules on PostgreSQL: one row per schedule (definition, pause state, last tick)."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Database, reads
from conveyor.storage.postgres.text import dec, enc
from conveyor.storage.schedule_records import ScheduleInfo


class PostgresSchedules:
    """The schedule part of ``Storage`` and ``Inspector`` over one database."""

    def __init__(self, db: Database, clock: ServerClock) -> None:
        self._db = db
        self._clock = clock

    def save_schedules(self, schedules: Sequence[ScheduleInfo]) -> None:
        """Create or update definitions; pause state, last ticks and creation time are kept."""
        now = self._clock.now()
        with self._db.write() as cur:
            cur.executemany(
                "INSERT INTO schedules (name, cron, tz, job_name, queue, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, tz = excluded.tz, "
                "job_name = excluded.job_name, queue = excluded.queue",
                [(enc(s.name), enc(s.cron), enc(s.tz), enc(s.job_name), enc(s.queue), now)
                 for s in schedules])

    @reads
    def schedule_pauses(self) -> dict[str, float | None]:
        """Paused schedules (None) and resumed ones (when)."""
        rows = self._db.read().execute(
            "SELECT name, paused, resumed_at FROM schedules "
            "WHERE paused OR resumed_at IS NOT NULL")
        return {str(dec(n)): None if p else r for n, p, r in rows}

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick."""
        with self._db.write() as cur:
            cur.execute("UPDATE schedules SET last_tick = greatest(coalesce(last_tick, 0), %s) "
                        "WHERE name = %s", (tick, enc(name)))

    @reads
    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        rows = self._db.read().execute(
            "SELECT name, cron, tz, job_name, queue, paused, last_tick, resumed_at, created_at "
            "FROM schedules ORDER BY name").fetchall()
        return [ScheduleInfo(str(dec(n)), str(dec(c)), str(dec(tz)), str(dec(j)), str(dec(q)),
                             bool(p), t, r, k)
                for n, c, tz, j, q, p, t, r, k in rows]

    def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; False if unknown."""
        with self._db.write() as cur:
            cur.execute("UPDATE schedules SET paused = true WHERE name = %s", (enc(name),))
            return cur.rowcount > 0

    def resume_schedule(self, name: str) -> bool:
        """Resume a schedule, noting when; False if unknown."""
        with self._db.write() as cur:
            # Only a paused schedule gets a new resumed_at: resuming a running one must not
            # stop a restarted worker from catching up ticks it really missed.
            cur.execute("UPDATE schedules SET resumed_at = %s, paused = false "
                        "WHERE name = %s AND paused", (self._clock.now(), enc(name)))
            if cur.rowcount:
                return True
            return cur.execute("SELECT 1 FROM schedules WHERE name = %s",
                               (enc(name),)).fetchone() is not None
