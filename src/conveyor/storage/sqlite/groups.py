"""Aggregation groups on SQLite, inside the caller's transaction: the steps of
``storage/aggregation.py`` over the ``agg_groups`` table and the ``jobs_aggregating`` index
(migrations/007_aggregation.sql)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from conveyor.core.job import EventKind, FlowControl, JobState, LeasedJob
from conveyor.storage import aggregation
from conveyor.storage.aggregation import Arrival, Group, Rest
from conveyor.storage.sqlite import batches, jobs, leases
from conveyor.storage.sqlite.group_rows import GROUP, Joiner, group_row, load, save

_MEMBERS = ("FROM jobs INDEXED BY jobs_aggregating WHERE state = 'aggregating' AND queue = ? "
            "AND name = ? AND group_key = ?")
_ALIVE = "('pending', 'scheduled', 'retrying', 'active')"
# The members a lead takes, leased on the lead's terms (its token, worker and expiry).
# "+state": with a plain "state = 'aggregating'" the planner walked an index of every
# aggregating member (40 ms a run with 100,000 of them) instead of looking up the ids.
_TAKE = """
UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = :worker, token = :token,
    lease_expires_at = :expires, started_at = :now, cancel_requested = 0,
    events = events || json_object('t', :now, 'k', 'started', 's', 'active', 'w', :worker,
                                   'a', attempt + 1, 'd', json_object('lead', :lead)) || char(10)
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = 'aggregating'
RETURNING CAST(id AS BLOB), CAST(name AS BLOB), queue, CAST(payload AS BLOB), token, attempt,
    errors, max_retries, timeout, CAST(batch_id AS BLOB), recoveries, ready_at, id
"""


def arrival_of(row: Sequence[Any]) -> Arrival | None:
    """The arrival of a job from ``(id, queue, name, flow JSON)``, or None."""
    try:
        flow = FlowControl.from_wire(json.loads(row[3])) if row[3] else None
    except (ValueError, TypeError):  # damaged: it runs as a lead of its own
        return None
    return aggregation.arrival(row[0], row[1], row[2], flow)


def promote(cur: sqlite3.Cursor, now: float, rows: list[Any]) -> tuple[list[Any], list[Any]]:
    """Split due rows ``(id, state, batch_id)`` into those going pending and the members
    going back into their groups."""
    found = cur.execute(
        "SELECT id, queue, name, flow FROM jobs WHERE id IN (SELECT value FROM json_each(?)) "
        "AND group_key IS NOT NULL", (jobs.ids_param(r[0] for r in rows),)).fetchall()
    if not found:
        return rows, []
    joiner = Joiner(cur, now)
    back = {a.id for r in found if (a := arrival_of(r)) is not None and not joiner.leads(a)}
    joiner.write()
    return [r for r in rows if r[0] not in back], [r for r in rows if r[0] in back]


def flush(cur: sqlite3.Cursor, now: float, limit: int) -> int:
    """Send a lead for each due group; returns how many were sent."""
    due = [group_row(r) for r in cur.execute(
        f"SELECT {GROUP} FROM agg_groups WHERE flush_at <= ? ORDER BY flush_at LIMIT ?",
        (now, limit))]
    if not due:
        return 0
    txn = _Flush(cur, now)
    kept, drop = aggregation.flush(txn, due, now)
    save(cur, kept)
    cur.executemany("DELETE FROM agg_groups WHERE queue = ? AND name = ? AND key = ?",
                    [g.id for g in drop])
    batches.apply(cur, now, txn.moves, jobs.insert)
    return txn.sent


def gather(cur: sqlite3.Cursor, now: float, lead: str, token: str) -> list[LeasedJob] | None:
    """Lease the members of ``lead``'s group (see ``Storage.gather``)."""
    row = cur.execute(
        "SELECT queue, name, group_key, worker, lease_expires_at FROM jobs "
        "WHERE id = ? AND state = 'active' AND token = ?", (lead, token)).fetchone()
    if row is None:
        return None
    queue, name, key, worker, expires = row
    group = None if key is None else load(cur, (queue, name, key))
    if group is None:
        return []
    ids = [r[0] for r in cur.execute(f"SELECT id {_MEMBERS} ORDER BY ready_at, id LIMIT ?",
                                     (queue, name, key, max(group.max_size - 1, 0)))]
    rows = cur.execute(_TAKE, {"worker": worker, "token": token, "expires": expires,
                               "now": now, "lead": lead, "ids": jobs.ids_param(ids)}).fetchall()
    rows.sort(key=lambda r: (r[11], r[12]))
    taken = [leases.leased(r) for r in rows]
    batches.apply(cur, now, [(j.batch_id, "aggregating", "active") for j in taken
                             if j.batch_id], jobs.insert)
    size, first = cur.execute(
        f"SELECT count(*), min(ready_at) FROM (SELECT ready_at {_MEMBERS} "
        "ORDER BY ready_at, id LIMIT ?)", (queue, name, key, group.max_size)).fetchone()
    if aggregation.gather(group, lead, Rest(size, first), now):
        save(cur, [group])
    else:
        cur.execute("DELETE FROM agg_groups WHERE queue = ? AND name = ? AND key = ?",
                    group.id)
    return taken


class _Flush:
    """``aggregation.FlushTxn`` inside one SQLite transaction."""

    def __init__(self, cur: sqlite3.Cursor, now: float) -> None:
        self._cur = cur
        self._now = now
        self.moves: list[batches.Move] = []
        self.sent = 0

    def alive(self, leads: Sequence[str]) -> set[str]:
        return {r[0] for r in self._cur.execute(
            f"SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(?)) "
            f"AND +state IN {_ALIVE}", (jobs.ids_param(leads),))}

    def oldest(self, group: Group) -> str | None:
        row = self._cur.execute(f"SELECT id {_MEMBERS} ORDER BY ready_at, id LIMIT 1",
                                group.id).fetchone()
        return None if row is None else str(row[0])

    def lead(self, job_id: str) -> None:
        batch = self._cur.execute("SELECT batch_id FROM jobs WHERE id = ?",
                                  (job_id,)).fetchone()[0]
        self.moves += jobs.move(self._cur, self._now, [(job_id, "aggregating", batch)],
                                JobState.PENDING, EventKind.FLUSHED,
                                "its group is due: it leads the group's run",
                                "ready_at = :now")
        self.sent += 1
