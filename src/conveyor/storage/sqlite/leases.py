"""Leases on SQLite: the statements that hand a pending job to a worker and take a lost
one back, shared by ``dequeue``, ``reclaim_expired``, ``release_worker`` and the outbox's
``start`` (storage/sqlite/outbox.py), so a job started from a broker delivery is leased and
recovered exactly as a dequeued one.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from conveyor.core.job import EventKind, JobState, LeasedJob
from conveyor.storage.rules import cancelled_message
from conveyor.storage.sqlite import batches, jobs

LEASE = """
UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = :worker,
    token = lower(hex(randomblob(12))), lease_expires_at = :expires, started_at = :now,
    cancel_requested = 0,
    events = events || json_object('t', :now, 'k', 'started', 's', 'active', 'w', :worker,
                                   'a', attempt + 1) || char(10)
WHERE {where}
RETURNING CAST(id AS BLOB), CAST(name AS BLOB), queue, CAST(payload AS BLOB), token, attempt,
    errors, max_retries, timeout, CAST(batch_id AS BLOB), recoveries, ready_at, rowid, cost
"""
# Text another program wrote is read as bytes and decoded row by row (``jobs.decode_text``):
# one row that is not UTF-8 must not fail the whole fetch. The queue matched :queue, so it is
# sound; the token is ours.
# Matching on rowid, not the text id, measured about four times faster.
LEASE_FIRST = LEASE.format(
    where="rowid IN (SELECT rowid FROM jobs WHERE state = 'pending' AND lined = 0 "
    "AND queue = :queue ORDER BY ready_at LIMIT :count)"
)
LEASE_IDS = LEASE.format(
    where="rowid IN (SELECT rowid FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))) "
    "AND state = 'pending'"
)
# Recovery's rows. Text another program wrote is read as bytes and decoded (``decoded_rows``):
# one name or batch id that was not UTF-8 made the whole read raise, so no expired lease was
# reclaimed again and no dead worker's jobs released (tests/sqlite/test_unreadable_rows.py).
_RECOVERY_COLUMNS = ("CAST(id AS BLOB), state, CAST(batch_id AS BLOB), recoveries, queue, "
                     "CAST(name AS BLOB), cancel_requested")
RECLAIM = (
    f"SELECT {_RECOVERY_COLUMNS} FROM jobs "
    "INDEXED BY jobs_lease WHERE state = 'active' AND lease_expires_at <= :now UNION ALL "
    f"SELECT {_RECOVERY_COLUMNS} FROM jobs "
    "WHERE state = 'active' AND lease_expires_at IS NULL LIMIT :limit"
)
# The jobs one worker holds (``release_worker``): only active jobs are in the lease index.
HELD = (
    f"SELECT {_RECOVERY_COLUMNS} FROM jobs "
    "INDEXED BY jobs_lease WHERE state = 'active' AND worker = ?"
)


def decoded_rows(cur: sqlite3.Cursor, sql: str, params: Any,
                 keep: Collection[int] = ()) -> list[tuple[Any, ...]]:
    """The rows of ``sql``, every value read as bytes decoded as ``dequeue`` decodes text (bad
    bytes as U+FFFD): a damaged job is handled like any other, its damage named when it is
    next leased (``RECLAIM``, ``HELD``, the outbox's ``start``). Positions in ``keep`` stay
    bytes (flow-control keys: ``flow.flow_row`` decodes them by the key rule)."""
    return [tuple(v.decode("utf-8", "replace") if isinstance(v, bytes) and i not in keep
                  else v for i, v in enumerate(row))
            for row in cur.execute(sql, params)]

def recover(cur: sqlite3.Cursor, now: float, rows: Sequence[Any], max_recoveries: int,
             why: str) -> int:
    """Recover active jobs selected as ``RECLAIM`` does (a lost attempt: pending again, dead
    past ``max_recoveries``, cancelled on request); returns how many went back to pending."""
    back = [r[:3] for r in rows if r[3] + 1 <= max_recoveries and not r[6]]
    moves = jobs.move(cur, now, back, JobState.PENDING, EventKind.RECOVERED,
                      why, f"recoveries = recoveries + 1, {jobs.REQUEUE}")
    # A cancel request was made: the lost attempt ends the job, as an error would.
    moves += jobs.move(cur, now, [r[:3] for r in rows if r[6]], JobState.CANCELLED,
                       EventKind.CANCELLED, cancelled_message(why),
                       "recoveries = recoveries + 1, message = :msg, "
                       "finished_at = :now, token = NULL, lease_expires_at = NULL")
    for r in rows:
        if r[3] + 1 > max_recoveries and not r[6]:
            moves += jobs.move(
                cur, now, [r[:3]], JobState.DEAD, EventKind.DEAD,
                f"recovered {r[3] + 1} times (poison job?)",
                f"recoveries = recoveries + 1, message = :msg, {jobs.FINISH}",
            )
    dead = Counter((r[4], r[5], "dead") for r in rows
                   if r[3] + 1 > max_recoveries and not r[6])
    if dead:
        jobs.add_totals(cur, now, dead)
    batches.apply(cur, now, moves, jobs.insert)
    return len(back)


def leased(row: Sequence[Any]) -> LeasedJob:
    (job_id, name, payload, batch_id), unreadable = jobs.decode_text(
        row, {"id": 0, "name": 1, "payload": 3, "batch_id": 9})
    return LeasedJob(
        id=job_id or "", name=name or "", queue=row[2], payload=payload or "", token=row[4],
        attempt=row[5], errors=row[6], max_retries=row[7], timeout=row[8], batch_id=batch_id,
        recoveries=row[10], unreadable=unreadable, cost=row[13] if len(row) > 13 else 1,
    )
