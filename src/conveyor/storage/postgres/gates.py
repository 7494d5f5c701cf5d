"""PostgreSQL's ``Inspector.gate_facts``: what holds a job back, read from the rows, indexes
and functions its ``dequeue`` decides by (``storage/gates.py``; ``functions/gate_check.sql``,
``lineup_pick.sql``: the turn order is read through ``lineup_next`` itself)."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from conveyor.core.job import JobState, Node
from conveyor.storage.gates import FAIR_KEYS_SHOWN, GateFacts, Holder
from conveyor.storage.lineup import keys_before
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Database, reads
from conveyor.storage.postgres.inspect import PostgresInspector

__all__ = ["PostgresGates"]

Cursor = psycopg.Cursor[Any]

_JOB = ("SELECT lined, priority, fair_key, age_next, ready_at, seq, publish_at, "
        "concurrency_key, order_key, rate_key, rate_period FROM jobs WHERE id = %s")
# Each count names its index's predicate (jobs_ready: plain jobs; jobs_lineup: lined ones).
_BEFORE_PLAIN = ("SELECT count(*) FROM jobs WHERE state = 'pending' AND NOT lined "
                 "AND queue = %s AND (ready_at, seq) < (%s, %s)")
_BEFORE_LINED = ("SELECT count(*) FROM jobs WHERE state = 'pending' AND lined AND queue = %s "
                 "AND priority = %s AND fair_key IS NOT DISTINCT FROM %s "
                 "AND (ready_at, seq) < (%s, %s)")
_HIGHER = ("SELECT count(*) FROM jobs WHERE state = 'pending' AND lined AND queue = %s "
           "AND priority > %s")
_PLAIN_COUNT = "SELECT count(*) FROM jobs WHERE state = 'pending' AND NOT lined AND queue = %s"
_LINED = "SELECT 1 FROM jobs WHERE state = 'pending' AND lined AND queue = %s LIMIT 1"


class PostgresGates:
    """``gate_facts`` over one PostgreSQL schema (a part of ``PostgresStorage``)."""

    def __init__(self, db: Database, clock: ServerClock, inspector: PostgresInspector) -> None:
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
        lined, priority, fair_key, age_next, ready_at, seq, publish_at = row[:7]
        facts = GateFacts(job=record, now=self._clock.now(), band=priority if lined else 0,
                          age_next=age_next)
        facts.paused = cur.execute("SELECT 1 FROM queues WHERE name = %s AND paused",
                                   (record.queue,)).fetchone() is not None
        if record.state is JobState.PENDING:
            _limits(cur, facts, row[7:])
            facts.published = publish_at is not None and publish_at > 0
            if place:
                _place(cur, facts, fair_key, (ready_at, seq))
        elif record.state is JobState.WAITING:
            facts.parents = _parents(cur, job_id)
        elif record.state is JobState.AGGREGATING and record.flow is not None:
            group = cur.execute(
                "SELECT size, flush_at FROM agg_groups WHERE queue = %s AND name = %s "
                "AND key = %s", (record.queue, record.name, record.flow.group_key or "")
            ).fetchone()
            if group is not None:
                facts.members, facts.flush_at = int(group[0]), float(group[1])
        return facts


class _FairKeys:
    """``lineup.FairKeys`` over one queue, read through the walk's own ``lineup_next``."""

    def __init__(self, cur: Cursor, queue: str) -> None:
        self.cur, self.queue = cur, queue

    def next_key(self, band: int, after: str | None) -> str | None:
        """The first key after ``after`` with a pending job at ``band``."""
        row = self.cur.execute("SELECT lineup_next(%s, %s, %s)",
                               (self.queue, band, after)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def pointer(self) -> str | None:
        """The fair key served last in the queue."""
        row = self.cur.execute("SELECT fair_pointer FROM queues WHERE name = %s",
                               (self.queue,)).fetchone()
        return None if row is None else row[0]


def _limits(cur: Cursor, facts: GateFacts, keys: tuple[Any, ...]) -> None:
    """The holders of the job's concurrency and order keys, its rate key's window."""
    ckey, okey, rkey, period = keys
    if ckey is not None:
        facts.concurrency = [
            Holder(r[0], "active", r[1], int(r[2])) for r in cur.execute(
                "SELECT id, started_at, cost FROM jobs WHERE state = 'active' "
                "AND concurrency_key = %s", (ckey,))]
    if okey is not None:
        first = cur.execute(  # as gate_check reads it
            "SELECT id, state, started_at, run_at FROM jobs WHERE order_key = %s "
            "AND state IN ('pending', 'active', 'retrying') AND octet_length(order_key) <= 512 "
            "ORDER BY seq LIMIT 1", (okey,)).fetchone()
        if first is not None and first[0] != facts.job.id:
            facts.order_holder = Holder(first[0], first[1],
                                        first[2] if first[1] == "active" else first[3])
    if rkey is not None:
        facts.rate_starts = [r[0] for r in cur.execute(
            "SELECT ts FROM rate_hits WHERE key = %s AND ts > %s", (rkey, facts.now - period))]


def _place(cur: Cursor, facts: GateFacts, fair_key: str | None, at: tuple[float, int]) -> None:
    """Where the job stands: higher priorities, keys before its own, jobs before it."""
    queue, band = facts.job.queue, facts.band
    if not cur.execute(_LINED, (queue,)).fetchone():
        facts.earlier = _count(cur, _BEFORE_PLAIN, (queue, *at))
        return
    facts.higher = _count(cur, _HIGHER, (queue, band))
    if band < 0:
        facts.higher += _count(cur, _PLAIN_COUNT, (queue,))
    facts.earlier = _count(cur, _BEFORE_LINED, (queue, band, fair_key, *at))
    if band == 0 and fair_key is None:  # the plain jobs share the unkeyed turn, in arrival order
        facts.earlier += _count(cur, _BEFORE_PLAIN, (queue, *at))
    facts.keys_before, facts.keys_before_count = keys_before(
        _FairKeys(cur, queue), band, fair_key or "", FAIR_KEYS_SHOWN)


def _count(cur: Cursor, sql: str, params: tuple[Any, ...]) -> int:
    row = cur.execute(sql, params).fetchone()
    return 0 if row is None else int(row[0])


def _parents(cur: Cursor, job_id: str) -> list[Holder]:
    row = cur.execute("SELECT node FROM wf_nodes WHERE id = %s", (job_id,)).fetchone()
    if row is None:
        return []
    parents = Node.from_wire(json.loads(row[0])).parents
    states = {i: s for i, s in cur.execute(
        "SELECT id, state FROM jobs WHERE id = ANY(%s::text[])", (list(parents),))}
    return [Holder(p, states[p]) for p in parents
            if p in states and JobState(states[p]) not in _DONE]


_DONE = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})
