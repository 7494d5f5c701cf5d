"""Periodic schedules on SQLite: one row per schedule and a table of changes (the audit
trail), each change one ``BEGIN IMMEDIATE`` transaction (the rules of each change are
``storage/schedule_edits.py``'s)."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable

from conveyor.storage.schedule_edits import CHANGES_KEPT, ScheduleTxn, T
from conveyor.storage.schedule_records import (
    COLUMNS,
    WRITTEN,
    ScheduleChange,
    ScheduleInfo,
    written,
)
from conveyor.storage.sqlite.connection import Database, reads

_SELECT = f"SELECT {', '.join(COLUMNS)} FROM schedules"
_UPSERT = (f"INSERT INTO schedules ({', '.join(WRITTEN)}) "
           f"VALUES ({', '.join('?' for _ in WRITTEN)}) ON CONFLICT (name) DO UPDATE SET "
           + ", ".join(f"{c} = excluded.{c}" for c in WRITTEN if c != "name"))


def _info(row: tuple[object, ...]) -> ScheduleInfo:
    info = ScheduleInfo(*row)  # type: ignore[arg-type]
    return dataclasses.replace(info, paused=bool(info.paused))


class _Step:
    """One schedule's change inside a write transaction."""

    def __init__(self, cur: sqlite3.Cursor, name: str) -> None:
        self.cur = cur
        self.name = name

    def read(self) -> ScheduleInfo | None:
        row = self.cur.execute(f"{_SELECT} WHERE name = ?", (self.name,)).fetchone()
        return None if row is None else _info(row)

    def write(self, info: ScheduleInfo) -> None:
        self.cur.execute(_UPSERT, written(info))

    def delete(self) -> None:
        self.cur.execute("DELETE FROM schedules WHERE name = ?", (self.name,))

    def note(self, change: ScheduleChange) -> None:
        self.cur.execute("INSERT INTO schedule_changes (at, name, action, changed_by, detail) "
                         "VALUES (?, ?, ?, ?, ?)", (change.at, change.name, change.action,
                                                   change.by, change.detail))
        self.cur.execute("DELETE FROM schedule_changes WHERE seq <= "
                         "(SELECT max(seq) FROM schedule_changes) - ?", (CHANGES_KEPT,))


class SqliteSchedules:
    """The schedules over one database: the steps ``ScheduleEdits`` runs its rules in, the
    ticks and the audit trail."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def apply(self, name: str, rule: Callable[[ScheduleTxn], T]) -> T:
        """Run ``rule`` over schedule ``name`` in one write transaction (``ScheduleSteps``)."""
        with self._db.write() as cur:
            return rule(_Step(cur, name))

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick."""
        with self._db.write() as cur:
            cur.execute("UPDATE schedules SET last_tick = MAX(COALESCE(last_tick, 0), ?) "
                        "WHERE name = ?", (tick, name))

    @reads
    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        rows = self._db.read().execute(f"{_SELECT} ORDER BY name").fetchall()
        return [_info(row) for row in rows]

    @reads
    def schedule_changes(self, name: str | None = None, limit: int = 50
                         ) -> list[ScheduleChange]:
        """The audit trail, newest first."""
        where, params = ("WHERE name = ? ", (name,)) if name is not None else ("", ())
        rows = self._db.read().execute(
            f"SELECT at, name, action, changed_by, detail FROM schedule_changes {where}"
            "ORDER BY seq DESC LIMIT ?", (*params, max(0, limit))).fetchall()
        return [ScheduleChange(*row) for row in rows]
