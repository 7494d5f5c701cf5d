"""Circuit breakers on SQLite: the ``breakers`` table (migration 012), read and written in the
transaction of the dequeue that leases a key's job (``flow.allows``/``flow.take``) and of the
ack that records its outcome (``acks.apply``); and the operators' ``breakers`` and
``close_breaker``. The rules are ``storage/breakers.py``'s.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from conveyor.core.breaker import CLOSED, BreakerState
from conveyor.core.clock import Clock
from conveyor.core.job import Ack, Event, EventKind, FlowControl, Outcome
from conveyor.storage.breakers import (
    START,
    BreakerRow,
    after_ack,
    breaker_touch,
    lease_verdict,
    listed,
    probe,
)
from conveyor.storage.sqlite.connection import Database, reads

__all__ = ["SqliteBreakers", "acked", "read", "verdict"]

_COLUMNS = "key, state, failures, within, opened_at, probe_at, probe_id, reason, trips"
_READ = f"SELECT {_COLUMNS} FROM breakers WHERE key = ?"
_WRITE = f"INSERT OR REPLACE INTO breakers ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_EVENT = "UPDATE jobs SET events = events || ? WHERE id = ?"


class SqliteBreakers:
    """The operators' view of breakers (a part of ``SqliteStorage``)."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    @reads
    def breakers(self) -> list[BreakerState]:
        """Open and half-open breakers first, then closed ones with counted errors."""
        now = self._clock.now()
        rows = self._db.read().execute(f"SELECT {_COLUMNS} FROM breakers").fetchall()
        return listed([_row(r).view(now) for r in rows])

    def close_breaker(self, key: str) -> bool:
        """Close breaker ``key`` by hand, its log cleared; True when it held jobs back."""
        with self._db.write() as cur:
            row = cur.execute("DELETE FROM breakers WHERE key = ? RETURNING state",
                              (key,)).fetchone()
        return row is not None and row[0] != CLOSED


def read(cur: sqlite3.Cursor, key: str) -> BreakerRow | None:
    """The row of breaker ``key``; None: closed and clean."""
    found = cur.execute(_READ, (key,)).fetchone()
    return None if found is None else _row(found)


def verdict(cur: sqlite3.Cursor, now: float, row: BreakerRow | None, probed: bool) -> str:
    """``lease_verdict`` of a pending job of ``row``'s key; ``probed``: this call took the
    key's probe already."""
    if row is None or row.state == CLOSED:
        return START
    running = probed or (row.probe_id is not None and cur.execute(
        "SELECT 1 FROM jobs WHERE id = ? AND state = 'active'", (row.probe_id,)
    ).fetchone() is not None)
    return lease_verdict(row, now, running)


def make_probe(cur: sqlite3.Cursor, now: float, row: BreakerRow, job_id: str) -> None:
    """Lease ``job_id`` as ``row``'s probe (it is leased in this transaction)."""
    text = probe(row, job_id)
    _save(cur, row)
    event = Event(ts=now, kind=EventKind.BREAKER, state="pending", message=text)
    cur.execute(_EVENT, (event.to_json() + "\n", job_id))


def acked(cur: sqlite3.Cursor, now: float,
          items: Sequence[tuple[Ack, Outcome, str, int]]) -> None:
    """The breakers' side of acks just applied: (ack, applied outcome, key, the job's
    attempt) of each job with a breaker key, in order."""
    flows = {r[0]: FlowControl.from_wire(json.loads(r[1])) for r in cur.execute(
        "SELECT id, flow FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([a.job_id for a, _, _, _ in items]),))}
    for ack, outcome, key, attempt in items:
        touch, flow = breaker_touch(ack, outcome), flows.get(ack.job_id)
        if touch is None or flow is None:
            continue
        row, text = after_ack(read(cur, key), key, flow, touch, ack.job_id, now, ack)
        if row is None:
            cur.execute("DELETE FROM breakers WHERE key = ?", (key,))
        else:
            _save(cur, row)
        if text is not None:
            state = cur.execute("SELECT state FROM jobs WHERE id = ?",
                                (ack.job_id,)).fetchone()[0]
            event = Event(ts=now, kind=EventKind.BREAKER, state=state, message=text,
                          attempt=attempt)
            cur.execute(_EVENT, (event.to_json() + "\n", ack.job_id))


def _save(cur: sqlite3.Cursor, row: BreakerRow) -> None:
    cur.execute(_WRITE, (row.key, row.state, json.dumps(row.failures), row.within,
                         row.opened_at, row.probe_at, row.probe_id, row.reason, row.trips))


def _row(r: Sequence[Any]) -> BreakerRow:
    return BreakerRow(r[0], r[1], list(json.loads(r[2])), float(r[3]), r[4], r[5], r[6], r[7],
                      int(r[8]))
