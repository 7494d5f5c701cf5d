"""Periodic schedules on PostgreSQL: one row per schedule and a table of changes (the audit
trail, migration 019). Each change is one transaction under the transaction advisory lock of
the schedule's name, so two workers declaring a new schedule at once create it once (the
rules of each change are ``storage/schedule_edits.py``'s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from conveyor.storage.postgres.connection import Database, reads
from conveyor.storage.postgres.text import dec, enc, enc_opt
from conveyor.storage.schedule_edits import CHANGES_KEPT, ScheduleTxn, T
from conveyor.storage.schedule_records import (
    COLUMNS,
    WRITTEN,
    ScheduleChange,
    ScheduleInfo,
    written,
)

_SELECT = f"SELECT {', '.join(COLUMNS)} FROM schedules"
_UPSERT = (f"INSERT INTO schedules ({', '.join(WRITTEN)}) "
           f"VALUES ({', '.join('%s' for _ in WRITTEN)}) ON CONFLICT (name) DO UPDATE SET "
           + ", ".join(f"{c} = excluded.{c}" for c in WRITTEN if c != "name"))


def _info(row: tuple[Any, ...]) -> ScheduleInfo:
    values: list[Any] = [dec(v) if isinstance(v, str) else v for v in row]
    return ScheduleInfo(*values)


class _Step:
    """One schedule's change inside a transaction that holds the name's lock."""

    def __init__(self, cur: psycopg.Cursor[Any], name: str) -> None:
        self.cur = cur
        self.name = name

    def read(self) -> ScheduleInfo | None:
        row = self.cur.execute(f"{_SELECT} WHERE name = %s", (enc(self.name),)).fetchone()
        return None if row is None else _info(row)

    def write(self, info: ScheduleInfo) -> None:
        self.cur.execute(_UPSERT, tuple(enc(v) if isinstance(v, str) else v
                                        for v in written(info)))

    def delete(self) -> None:
        self.cur.execute("DELETE FROM schedules WHERE name = %s", (enc(self.name),))

    def note(self, change: ScheduleChange) -> None:
        self.cur.execute("INSERT INTO schedule_changes (at, name, action, changed_by, detail) "
                         "VALUES (%s, %s, %s, %s, %s)",
                         (change.at, enc(change.name), enc(change.action), enc(change.by),
                          enc(change.detail)))
        self.cur.execute("DELETE FROM schedule_changes WHERE seq <= "
                         "(SELECT max(seq) FROM schedule_changes) - %s", (CHANGES_KEPT,))


class PostgresSchedules:
    """The schedules over one database: the steps ``ScheduleEdits`` runs its rules in, the
    ticks and the audit trail."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def apply(self, name: str, rule: Callable[[ScheduleTxn], T]) -> T:
        """Run ``rule`` over schedule ``name`` in one transaction holding the name's lock
        (``ScheduleSteps``)."""
        with self._db.write() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('conveyor-schedule:' || %s))",
                        (enc(name),))
            return rule(_Step(cur, name))

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick."""
        with self._db.write() as cur:
            cur.execute("UPDATE schedules SET last_tick = greatest(coalesce(last_tick, 0), %s) "
                        "WHERE name = %s", (tick, enc(name)))

    @reads
    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        rows = self._db.read().execute(f"{_SELECT} ORDER BY name").fetchall()
        return [_info(row) for row in rows]

    @reads
    def schedule_changes(self, name: str | None = None, limit: int = 50
                         ) -> list[ScheduleChange]:
        """The audit trail, newest first."""
        where, params = ("WHERE name = %s ", (enc_opt(name),)) if name is not None else ("", ())
        rows = self._db.read().execute(
            "SELECT at, name, action, changed_by, detail FROM schedule_changes "
            f"{where}ORDER BY seq DESC LIMIT %s", (*params, max(0, limit))).fetchall()
        return [ScheduleChange(at, *(str(dec(v)) for v in rest)) for at, *rest in rows]
