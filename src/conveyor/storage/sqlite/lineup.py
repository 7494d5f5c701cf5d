"""SQLite's side of a queue's lineup (``storage/lineup.py``, migration 010).

A job with a priority, aging, a fair key or a cost above one is stored ``lined``: it is read
from ``jobs_lineup`` by (queue, priority, fair key, arrival) instead of ``jobs_ready``, which
keeps every other job in arrival order as before. ``dequeue`` walks a queue holding a lined
pending job with ``lineup.walk`` over ``SqliteLineup``, inside its ``BEGIN IMMEDIATE``; the
jobs it takes are leased together afterwards (``LEASE_IDS``), as ``flow.pick``'s are.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Iterator
from typing import Any

from conveyor.storage.lineup import KEY_SCAN, Candidate, Verdict, aged, walk
from conveyor.storage.sqlite import flow
from conveyor.storage.sqlite import leases as lease_sql
from conveyor.storage.sqlite.moves import Move, ids_param

__all__ = ["LINED", "SqliteLineup", "age", "lease"]

#: Whether a queue holds a lined pending job (the walk's, not the fast path's).
LINED = ("SELECT 1 FROM jobs INDEXED BY jobs_lineup "
         "WHERE state = 'pending' AND lined = 1 AND queue = ? LIMIT 1")

_LINED_PAGE = (
    f"SELECT id, {flow.FLOW_COLUMNS}, cost, ready_at, rowid FROM jobs INDEXED BY jobs_lineup "
    "WHERE state = 'pending' AND lined = 1 AND queue = ? AND priority = ? AND fair_key IS ? "
    "AND (ready_at, rowid) > (?, ?) ORDER BY ready_at, rowid LIMIT ?")
_PLAIN_PAGE = (
    f"SELECT id, {flow.FLOW_COLUMNS}, 1, ready_at, rowid FROM jobs INDEXED BY jobs_ready "
    "WHERE state = 'pending' AND lined = 0 AND queue = ? "
    "AND (ready_at, rowid) > (?, ?) ORDER BY ready_at, rowid LIMIT ?")
_TOP = ("SELECT priority FROM jobs INDEXED BY jobs_lineup WHERE state = 'pending' "
        "AND lined = 1 AND queue = ? AND priority < ? ORDER BY priority DESC LIMIT 1")
_PLAIN = ("SELECT 1 FROM jobs INDEXED BY jobs_ready WHERE state = 'pending' AND lined = 0 "
          "AND queue = ? LIMIT 1")
_UNKEYED = ("SELECT 1 FROM jobs INDEXED BY jobs_lineup WHERE state = 'pending' AND lined = 1 "
            "AND queue = ? AND priority = ? AND fair_key IS NULL LIMIT 1")
_NEXT_KEY = ("SELECT fair_key FROM jobs INDEXED BY jobs_lineup WHERE state = 'pending' "
             "AND lined = 1 AND queue = ? AND priority = ? AND fair_key > ? "
             "ORDER BY fair_key LIMIT 1")
_AGING = ("SELECT id, priority, age_next, aging FROM jobs INDEXED BY jobs_aging "
          "WHERE state = 'pending' AND age_next IS NOT NULL AND age_next <= ? LIMIT ?")


def lease(cur: sqlite3.Cursor, now: float, queue: str, room: int, capacity: int,
          params: dict[str, Any], moves: list[Move]) -> list[Any]:
    """Walk a queue holding a lined pending job and lease what the walk took, in its order
    (``LEASE`` rows); a job whose key breaks the key rule ends dead (``moves``)."""
    txn = SqliteLineup(cur, now, queue, flow.Gates())
    walk(txn, room, capacity)
    moves += flow.end_broken(cur, now, txn.gates)
    if not txn.taken:
        return []
    rows = cur.execute(lease_sql.LEASE_IDS, {**params, "ids": ids_param(txn.taken)}
                       ).fetchall()
    order = {job_id: i for i, job_id in enumerate(txn.taken)}
    rows.sort(key=lambda r: order.get(bytes(r[0]).decode("utf-8", "replace"), 0))
    return list(rows)


def age(cur: sqlite3.Cursor, now: float, limit: int) -> None:
    """Raise the priority of pending jobs whose aging time came (``lineup.aged``); a job at
    the top priority stops aging."""
    rows = cur.execute(_AGING, (now, limit)).fetchall()
    changes = []
    for job_id, priority, age_next, aging in rows:
        band, nxt = aged(priority, age_next, aging, now)
        changes.append((band, None if band >= 100 else nxt, job_id))
    cur.executemany("UPDATE jobs SET priority = ?, age_next = ? WHERE id = ?", changes)


class SqliteLineup:
    """``LineupTxn`` over one queue's pending rows, in the caller's transaction."""

    def __init__(self, cur: sqlite3.Cursor, now: float, queue: str, gates: flow.Gates) -> None:
        self.cur, self.now, self.queue, self.gates = cur, now, queue, gates
        self.taken: list[str] = []
        self._gone: set[str] = set()
        self._rows: dict[str, tuple[Any, ...]] = {}

    def top_band(self, below: int | None) -> int | None:
        """The highest priority below ``below`` with a pending job (plain jobs are 0)."""
        ceiling = 101 if below is None else below
        row = self.cur.execute(_TOP, (self.queue, ceiling)).fetchone()
        lined = None if row is None else int(row[0])
        if ceiling > 0 and (lined is None or lined < 0) and self._has_plain():
            return 0
        return lined

    def next_key(self, band: int, after: str | None) -> str | None:
        """The first key after ``after`` (``""``: no fair key) with a job at ``band``."""
        if after is None and (self.cur.execute(_UNKEYED, (self.queue, band)).fetchone()
                              or (band == 0 and self._has_plain())):
            return ""
        row = self.cur.execute(_NEXT_KEY, (self.queue, band, after or "")).fetchone()
        return None if row is None else str(row[0])

    def jobs(self, band: int, key: str) -> Iterator[Candidate]:
        """The key's jobs at ``band`` in arrival order (plain jobs merged in for ``""`` at
        priority 0), read a page at a time."""
        streams = [self._pages(_LINED_PAGE, (self.queue, band, key or None))]
        if band == 0 and key == "":
            streams.append(self._pages(_PLAIN_PAGE, (self.queue,)))
        for row in heapq.merge(*streams, key=lambda r: (r[-2], r[-1])):
            if row[0] not in self._gone:
                self._rows[row[0]] = row
                yield Candidate(row[0], int(row[8]))

    def judge(self, job: Candidate) -> str:
        """The flow gates' verdict (a key that breaks the key rule ends the job, later)."""
        row = self._rows[job.id]
        broken = len(self.gates.broken)
        if flow.allows(self.cur, self.now, flow.flow_row(row[:8]), self.gates, job.cost):
            return Verdict.START
        if len(self.gates.broken) > broken:
            self._gone.add(job.id)
            return Verdict.ENDED
        return Verdict.HELD

    def take(self, job: Candidate) -> None:
        """Count the job against its limits; it is leased with the others afterwards."""
        flow.take(self.cur, self.now, flow.flow_row(self._rows[job.id][:8]), self.gates,
                  job.cost)
        self._gone.add(job.id)
        self.taken.append(job.id)

    def pointer(self) -> str | None:
        """The fair key served last in the queue."""
        row = self.cur.execute("SELECT fair_pointer FROM queues WHERE name = ?",
                               (self.queue,)).fetchone()
        return None if row is None else row[0]

    def set_pointer(self, key: str) -> None:
        """Remember the key served last."""
        self.cur.execute("UPDATE queues SET fair_pointer = ? WHERE name = ?", (key, self.queue))

    def _has_plain(self) -> bool:
        return self.cur.execute(_PLAIN, (self.queue,)).fetchone() is not None

    def _pages(self, sql: str, head: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        after: tuple[Any, Any] = (float("-inf"), -1)
        size = 4
        read = 0
        while read < KEY_SCAN:
            rows = self.cur.execute(sql, (*head, *after, size)).fetchall()
            yield from rows
            read += len(rows)
            if len(rows) < size:
                return
            after = (rows[-1][-2], rows[-1][-1])
            size = min(size * 2, KEY_SCAN)
