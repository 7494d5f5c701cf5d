"""SQLite as a broker's outbox (``conveyor.storage.outbox.Outbox``, docs/internals/outbox.md).

One column, ``jobs.publish_at`` (migration 005): NULL = due now, a time = handed to a relay
and due again then if not started, negative = parked (flow control or a paused queue said no
at ``start``; due once the same admission code ``dequeue`` uses would let it run). ``start``
sets it back to NULL, so a job that later returns to pending by any path is due at once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from conveyor.core.clock import Clock
from conveyor.core.job import EventKind, JobState, LeasedJob
from conveyor.storage.outbox import (
    Arrival,
    Delivered,
    StartKind,
    StartReply,
    arrivals,
    mark,
    marked_by,
)
from conveyor.storage.rules import DEADLINE_PASSED, REDELIVERED
from conveyor.storage.sqlite import batches, flow, jobs
from conveyor.storage.sqlite import leases as lease_sql
from conveyor.storage.sqlite.connection import Database, reads

_PARKED = -1.0
_PAGE = 256
_MAX_SCAN = 4096  # bound one call's walk past jobs already in the broker or still parked

# Pending jobs of a queue in dequeue's order (the jobs_ready index), with their stamps; then
# the lined ones (storage/sqlite/lineup.py) in their index's order (a sort would read them
# all; with a broker the broker orders the deliveries), with their costs.
_PENDING = (
    f"SELECT id, {flow.FLOW_COLUMNS}, publish_at, 1 FROM jobs INDEXED BY jobs_ready "
    "WHERE state = 'pending' AND lined = 0 AND queue = ? ORDER BY ready_at LIMIT ? OFFSET ?"
)
_PENDING_LINED = (
    f"SELECT id, {flow.FLOW_COLUMNS}, publish_at, cost FROM jobs INDEXED BY jobs_lineup "
    "WHERE state = 'pending' AND lined = 1 AND queue = ? "
    "ORDER BY priority, fair_key, ready_at LIMIT ? OFFSET ?"
)
# ``batch_id`` and ``name`` read as bytes: one that is not UTF-8 (a damaged row) made the
# whole call raise, so every fetch of every broker-fed worker failed (the poison-data
# scenario). They are decoded as ``dequeue`` decodes them (bad bytes as U+FFFD), and
# ``lease_all`` reads the row as ``dequeue`` does: the job ends dead, the reason names it.
_ROWS = (
    f"SELECT id, {flow.FLOW_COLUMNS}, state, CAST(batch_id AS BLOB), deadline, recoveries, "
    "queue, CAST(name AS BLOB), cancel_requested, token, cost FROM jobs "
    "WHERE id IN (SELECT value FROM json_each(?))"
)

# As bytes, decoded: a damaged key must not fail the relay's whole round (its job gets its id).
_ORDER_KEYS = ("SELECT CAST(id AS BLOB), CAST(order_key AS BLOB) FROM jobs WHERE queue = ? "
               "AND order_key IS NOT NULL AND id IN (SELECT value FROM json_each(?))")


def _rows(cur: Any, job_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """``_ROWS`` for ``job_ids``, every value read as bytes decoded."""
    return [flow.flow_row(row) for row in lease_sql.decoded_rows(
        cur, _ROWS, (jobs.ids_param(job_ids),), keep=flow.KEYS_AT)]


class SqliteOutbox:
    """``publish_due``, ``publish_failed`` and ``start``; one ``BEGIN IMMEDIATE`` each."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def publish_due(self, queue: str, count: int, republish_after: float) -> list[str]:
        """Pending jobs of ``queue`` due to be published, stamped; see ``Outbox``."""
        if count <= 0:
            return []
        with self._db.write() as cur:
            if cur.execute("SELECT 1 FROM queues WHERE name = ? AND paused = 1",
                           (queue,)).fetchone():
                return []
            now = self._clock.now()
            due = _walk(cur, now, queue, count)
            cur.execute("UPDATE jobs SET publish_at = ? WHERE id IN "
                        "(SELECT value FROM json_each(?))",
                        (now + republish_after, jobs.ids_param(due)))
            return due

    def publish_failed(self, job_ids: Sequence[str]) -> None:
        """Unconfirmed publishes: due again at once."""
        with self._db.write() as cur:
            cur.execute("UPDATE jobs SET publish_at = NULL WHERE state = 'pending' AND "
                        "publish_at >= 0 AND id IN (SELECT value FROM json_each(?))",
                        (jobs.ids_param(job_ids),))

    @reads
    def order_keys(self, queue: str, job_ids: Sequence[str]) -> list[str | None]:
        """Each job's order key; see ``Outbox.order_keys``."""
        keys = dict(lease_sql.decoded_rows(self._db.read().cursor(), _ORDER_KEYS,
                                           (queue, jobs.ids_param(job_ids))))
        return [keys.get(job_id) for job_id in job_ids]

    def bury(self, job_ids: Sequence[str], reason: str) -> int:
        """Pending or active jobs the broker gave up on → dead; see ``Outbox.bury``."""
        if not job_ids:
            return 0
        with self._db.write() as cur:
            now = self._clock.now()
            rows = cur.execute(
                "SELECT id, state, batch_id, queue, name FROM jobs WHERE id IN "
                "(SELECT value FROM json_each(?)) AND state IN ('pending', 'active')",
                (jobs.ids_param(job_ids),)).fetchall()
            moves = jobs.move(cur, now, [r[:3] for r in rows], JobState.DEAD, EventKind.DEAD,
                              reason, f"message = :msg, publish_at = NULL, {jobs.FINISH}")
            if rows:
                jobs.add_totals(cur, now, Counter((r[3], r[4], "dead") for r in rows))
            batches.apply(cur, now, moves, jobs.insert)
            return len(rows)

    def start(self, queue: str, deliveries: Sequence[Delivered], worker_id: str,
              lease_seconds: float, max_recoveries: int = 5) -> list[StartReply]:
        """Lease delivered jobs; see ``Outbox.start``."""
        if not deliveries:
            return []
        with self._db.write() as cur:
            now = self._clock.now()
            return _Start(cur, now, queue, worker_id, lease_seconds, max_recoveries).run(
                arrivals(deliveries))


def _walk(cur: Any, now: float, queue: str, count: int) -> list[str]:
    """Ids of up to ``count`` due jobs, oldest first (a parked one only if it may run)."""
    gates = flow.Gates()
    due: list[str] = []
    for sql in (_PENDING, _PENDING_LINED):
        offset = 0
        while len(due) < count and offset < _MAX_SCAN:
            rows = cur.execute(sql, (queue, _PAGE, offset)).fetchall()
            if not rows:
                break
            offset += len(rows)
            for row in rows:
                stamp = row[-2]
                if stamp is None or 0 <= stamp <= now or (stamp < 0 and flow.would_admit(
                        cur, now, flow.flow_row(row[:-2]), gates, int(row[-1]))):
                    due.append(row[0])
                    if len(due) >= count:
                        break
    return due


class _Start:
    """One ``start`` call: the deliveries in order, each settled against the job's row; the
    admitted ones leased together in one statement, as ``dequeue`` leases."""

    def __init__(self, cur: Any, now: float, queue: str, worker: str, lease: float,
                 max_recoveries: int) -> None:
        self.cur, self.now, self.queue, self.worker = cur, now, queue, worker
        self.lease, self.max_recoveries = lease, max_recoveries
        self.gates = flow.Gates()
        self.paused = {r[0] for r in cur.execute("SELECT name FROM queues WHERE paused = 1")}
        self.rows: dict[str, Any] = {}

    def run(self, deliveries: list[Arrival]) -> list[StartReply]:
        ids = list(dict.fromkeys(d.job_id for d in deliveries))
        self.rows = {r[0]: r for r in _rows(self.cur, ids)}
        kinds = [self.one(*d) for d in deliveries]
        leased = self.lease_all({d.job_id: d.message for d, kind
                                 in zip(deliveries, kinds, strict=True) if kind is None})
        replies: list[StartReply] = []
        for (job_id, _, _), kind in zip(deliveries, kinds, strict=True):
            job = leased.pop(job_id, None) if kind is None else None
            if job is not None:
                replies.append(StartReply(job_id, StartKind.STARTED, job))
            else:  # a duplicate within the call, or a row whose id no longer reads back
                replies.append(StartReply(job_id, kind or StartKind.RUNNING))
        return replies

    def one(self, job_id: str, redelivered: bool, message: str | None) -> StartKind | None:
        """The reply for one delivery, or None for a job to lease."""
        row = self.rows.get(job_id)
        if row is None or row[12] != self.queue:
            return StartKind.FOREIGN
        state = row[8]
        if state == "leasing":  # admitted earlier in this call: a duplicate message
            return StartKind.RUNNING
        if state == "active":
            if not redelivered or not marked_by(row[15], message):
                return StartKind.RUNNING
            # (id, state, batch, recoveries, queue, name, cancel_requested) as RECLAIM reads
            lease_sql.recover(self.cur, self.now, [(row[0], state, row[9], *row[11:15])],
                              self.max_recoveries, REDELIVERED)
            row = _rows(self.cur, [job_id])[0]
            state = row[8]
        if state != "pending":
            self.rows[job_id] = (*row[:8], state, *row[9:])
            return StartKind.SKIPPED
        cur, now = self.cur, self.now
        if row[10] is not None and row[10] < now:
            moves = jobs.move(cur, now, [(job_id, "pending", row[9])], JobState.DEAD,
                              EventKind.EXPIRED, DEADLINE_PASSED,
                              f"message = :msg, publish_at = NULL, {jobs.FINISH}")
            batches.apply(cur, now, moves, jobs.insert)
            self.rows[job_id] = (*row[:8], "dead", *row[9:])
            return StartKind.SKIPPED
        admitted = row[12] not in self.paused and flow.admit_one(cur, now, row[:8], self.gates,
                                                                 int(row[16]))
        if self.gates.broken:  # a key that breaks the key rule: it ends here, as in dequeue
            batches.apply(cur, now, flow.end_broken(cur, now, self.gates), jobs.insert)
            self.rows[job_id] = (*row[:8], "dead", *row[9:])
            return StartKind.SKIPPED
        if not admitted:
            cur.execute("UPDATE jobs SET publish_at = ? WHERE id = ?", (_PARKED, job_id))
            return StartKind.PARKED
        self.rows[job_id] = (*row[:8], "leasing", *row[9:])
        return None

    def lease_all(self, messages: dict[str, str | None]) -> dict[str, LeasedJob]:
        """Lease the admitted jobs (id -> the message that carried it) in one statement."""
        if not messages:
            return {}
        cur, now = self.cur, self.now
        rows = cur.execute(lease_sql.LEASE_IDS, {
            "worker": self.worker, "now": now, "expires": now + self.lease,
            "ids": jobs.ids_param(list(messages))}).fetchall()
        leased = [lease_sql.leased(r) for r in rows]
        # Each token ends with its message's id (one statement per message: a call's
        # deliveries come in one or two messages).
        by_message: dict[str | None, list[int]] = {}
        for row, job in zip(rows, leased, strict=True):
            by_message.setdefault(messages.get(job.id), []).append(row[12])
            job.token += mark(messages.get(job.id))
        for message, rowids in by_message.items():
            cur.execute("UPDATE jobs SET publish_at = NULL, token = token || ? WHERE rowid IN "
                        "(SELECT value FROM json_each(?))", (mark(message), json.dumps(rowids)))
        moves: list[batches.Move] = [(j.batch_id, "pending", "active") for j in leased
                                     if j.batch_id]
        if moves:
            batches.apply(cur, now, moves, jobs.insert)
        return {j.id: j for j in leased}
