"""SQLite's ``Inspector.gate_facts``: what holds a job back, read from the rows and indexes
its ``dequeue`` decides by (``storage/gates.py``, ``flow.py``, ``lineup.py``)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from conveyor.core.clock import Clock
from conveyor.core.job import JobState, Node
from conveyor.storage.gates import FAIR_KEYS_SHOWN, GateFacts, Holder
from conveyor.storage.lineup import keys_before
from conveyor.storage.sqlite import flow
from conveyor.storage.sqlite.connection import Database, reads
from conveyor.storage.sqlite.inspect import SqliteInspector
from conveyor.storage.sqlite.lineup import LINED, SqliteLineup

__all__ = ["SqliteGates"]

_JOB = ("SELECT lined, priority, fair_key, age_next, ready_at, rowid, publish_at, "
        "concurrency_key, order_key, rate_key, rate_period FROM jobs WHERE id = ?")
_BEFORE_PLAIN = ("SELECT count(*) FROM jobs INDEXED BY jobs_ready WHERE state = 'pending' "
                 "AND lined = 0 AND queue = ? AND (ready_at, rowid) < (?, ?)")
_BEFORE_LINED = ("SELECT count(*) FROM jobs INDEXED BY jobs_lineup WHERE state = 'pending' "
                 "AND lined = 1 AND queue = ? AND priority = ? AND fair_key IS ? "
                 "AND (ready_at, rowid) < (?, ?)")
_HIGHER = ("SELECT count(*) FROM jobs INDEXED BY jobs_lineup WHERE state = 'pending' "
           "AND lined = 1 AND queue = ? AND priority > ?")
_PLAIN_COUNT = ("SELECT count(*) FROM jobs INDEXED BY jobs_ready WHERE state = 'pending' "
                "AND lined = 0 AND queue = ?")


class SqliteGates:
    """``gate_facts`` over one SQLite database (a part of ``SqliteStorage``)."""

    def __init__(self, db: Database, clock: Clock, inspector: SqliteInspector) -> None:
        self._db = db
        self._clock = clock
        self._inspector = inspector

    @reads
    def gate_facts(self, job_id: str, place: bool = True) -> GateFacts | None:
        """What the fetch would weigh for ``job_id`` now; None for an unknown id."""
        record = self._inspector.get_job(job_id)
        cur = self._db.read().cursor()
        row = cur.execute(_JOB, (job_id,)).fetchone()
        if record is None or row is None:
            return None
        lined, priority, fair_key, age_next, ready_at, rowid, publish_at = row[:7]
        facts = GateFacts(job=record, now=self._clock.now(), band=priority if lined else 0,
                          age_next=age_next)
        facts.paused = cur.execute("SELECT 1 FROM queues WHERE name = ? AND paused = 1",
                                   (record.queue,)).fetchone() is not None
        if record.state is JobState.PENDING:
            _limits(cur, facts, row[7:])
            facts.published = publish_at is not None and publish_at > 0
            if place:
                _place(cur, facts, fair_key or "", (ready_at, rowid))
        elif record.state is JobState.WAITING:
            facts.parents = _parents(cur, job_id)
        elif record.state is JobState.AGGREGATING and record.flow is not None:
            group = cur.execute(
                "SELECT size, flush_at FROM agg_groups WHERE queue = ? AND name = ? AND key = ?",
                (record.queue, record.name, record.flow.group_key or "")).fetchone()
            if group is not None:
                facts.members, facts.flush_at = int(group[0]), float(group[1])
        return facts


def _limits(cur: sqlite3.Cursor, facts: GateFacts, keys: tuple[Any, ...]) -> None:
    """The holders of the job's concurrency and order keys, its rate key's window."""
    ckey, okey, rkey, period = keys
    if ckey is not None:
        facts.concurrency = [
            Holder(r[0], "active", r[1], int(r[2])) for r in cur.execute(
                "SELECT id, started_at, cost FROM jobs WHERE state = 'active' "
                "AND concurrency_key = ?", (ckey,))]
    if okey is not None:
        first = cur.execute(  # as flow._first_in_order reads it
            "SELECT id, state, started_at, run_at FROM jobs WHERE order_key = ? "
            "AND state IN ('pending', 'active', 'retrying') ORDER BY rowid LIMIT 1",
            (okey,)).fetchone()
        if first is not None and first[0] != facts.job.id:
            facts.order_holder = Holder(first[0], first[1],
                                        first[2] if first[1] == "active" else first[3])
    if rkey is not None:
        facts.rate_starts = [r[0] for r in cur.execute(
            "SELECT ts FROM rate_hits WHERE key = ? AND ts > ?", (rkey, facts.now - period))]


def _place(cur: sqlite3.Cursor, facts: GateFacts, key: str, at: tuple[float, int]) -> None:
    """Where the job stands: higher priorities, keys before its own, jobs before it."""
    queue, band = facts.job.queue, facts.band
    if not cur.execute(LINED, (queue,)).fetchone():
        facts.earlier = cur.execute(_BEFORE_PLAIN, (queue, *at)).fetchone()[0]
        return
    facts.higher = cur.execute(_HIGHER, (queue, band)).fetchone()[0]
    if band < 0:
        facts.higher += cur.execute(_PLAIN_COUNT, (queue,)).fetchone()[0]
    facts.earlier = cur.execute(_BEFORE_LINED, (queue, band, key or None, *at)).fetchone()[0]
    if band == 0 and key == "":  # the plain jobs share the unkeyed turn, in arrival order
        facts.earlier += cur.execute(_BEFORE_PLAIN, (queue, *at)).fetchone()[0]
    txn = SqliteLineup(cur, facts.now, queue, flow.Gates())
    facts.keys_before, facts.keys_before_count = keys_before(txn, band, key, FAIR_KEYS_SHOWN)


def _parents(cur: sqlite3.Cursor, job_id: str) -> list[Holder]:
    row = cur.execute("SELECT node FROM wf_nodes WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return []
    parents = Node.from_wire(json.loads(row[0])).parents
    states = dict(cur.execute(
        "SELECT id, state FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(parents)),)).fetchall())
    return [Holder(p, states[p]) for p in parents
            if p in states and JobState(states[p]) not in _DONE]


_DONE = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})
