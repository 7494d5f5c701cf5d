"""``Inspector.gate_facts`` for the SQL stores, written once (``storage/gates.py``): what holds
a job back, read in one transaction from the rows and indexes the store's own fetch decides
by. A store gives its statements (``GateSql``: its placeholders, index hints and column of
arrival) and its turn order (``lineup.FairKeys``); the reading and deciding is here.

The statements' results, in order: ``job``: lined, priority, fair key, age_next, ready_at,
the arrival tie-break (rowid or seq), publish_at, concurrency key, order key, rate key, rate
period; ``holders``: id, started_at, cost of a key's active jobs; ``order_first``: id, state,
started_at, run_at of the job holding an order key; ``rates``: start times of a rate key
after a time; ``group``: size, flush_at of an aggregation; ``node``: a workflow node's JSON;
``states``: id, state of the jobs of a list of ids; the rest one count or one row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor.core.breaker import CLOSED, BreakerState
from conveyor.core.job import JobRecord, JobState, Node
from conveyor.storage.breakers import BreakerRow
from conveyor.storage.gates import FAIR_KEYS_SHOWN, GateFacts, Holder
from conveyor.storage.lineup import FairKeys, keys_before

__all__ = ["GateSql", "read_gate_facts"]


@dataclass(frozen=True, slots=True)
class GateSql:
    """One SQL store's statements for ``read_gate_facts`` (module docstring: their rows)."""

    job: str  # (job id)
    paused: str  # (queue): a row when the queue is paused
    holders: str  # (concurrency key)
    order_first: str  # (order key)
    rates: str  # (rate key, after)
    group: str  # (queue, name, group key)
    lined: str  # (queue): a row when it holds a lined pending job
    before_plain: str  # (queue, ready_at, tie-break)
    before_lined: str  # (queue, priority, fair key or None, ready_at, tie-break)
    higher: str  # (queue, priority)
    plain_count: str  # (queue)
    node: str  # (job id)
    states: str  # (ids, as ``ids`` gives them)
    #: The ``states`` parameter for a list of ids (a JSON array, an array).
    ids: Callable[[list[str]], Any]
    #: (breaker key): key, state, failures (a JSON array or an array), within, opened_at,
    #: probe_at, probe_id, reason, trips; "": the store keeps no breakers here.
    breaker: str = ""


def read_gate_facts(cur: Any, sql: GateSql, record: JobRecord | None, now: float,
                    fair_keys: Callable[[str], FairKeys], place: bool) -> GateFacts | None:
    """The facts of ``record``'s job read with ``cur`` (a DB-API cursor, in the caller's
    read transaction); ``fair_keys(queue)`` reads its queue's turn order; None for an
    unknown job."""
    row = cur.execute(sql.job, (record.id,)).fetchone() if record is not None else None
    if record is None or row is None:
        return None
    lined, priority, fair_key, age_next, ready_at, tie, publish_at = row[:7]
    facts = GateFacts(job=record, now=now, band=priority if lined else 0, age_next=age_next)
    facts.paused = cur.execute(sql.paused, (record.queue,)).fetchone() is not None
    if record.state is JobState.PENDING:
        _limits(cur, sql, facts, row[7:])
        facts.published = publish_at is not None and publish_at > 0
        if place:
            _place(cur, sql, facts, fair_key, (ready_at, tie), fair_keys)
        key = record.flow.breaker_key if record.flow is not None else None
        if key is not None and sql.breaker:
            facts.breaker = _breaker(cur.execute(sql.breaker, (key,)).fetchone(), now)
    elif record.state is JobState.WAITING:
        facts.parents = _parents(cur, sql, record.id)
    elif record.state is JobState.AGGREGATING and record.flow is not None:
        group = cur.execute(sql.group, (record.queue, record.name,
                                        record.flow.group_key or "")).fetchone()
        if group is not None:
            facts.members, facts.flush_at = int(group[0]), float(group[1])
    return facts


def _limits(cur: Any, sql: GateSql, facts: GateFacts, keys: tuple[Any, ...]) -> None:
    """The holders of the job's concurrency and order keys, its rate key's window."""
    ckey, okey, rkey, period = keys
    if ckey is not None:
        facts.concurrency = [Holder(r[0], "active", r[1], int(r[2]))
                             for r in cur.execute(sql.holders, (ckey,)).fetchall()]
    if okey is not None:
        first = cur.execute(sql.order_first, (okey,)).fetchone()
        if first is not None and first[0] != facts.job.id:
            facts.order_holder = Holder(first[0], first[1],
                                        first[2] if first[1] == "active" else first[3])
    if rkey is not None:
        facts.rate_starts = [r[0] for r in
                             cur.execute(sql.rates, (rkey, facts.now - period)).fetchall()]


def _place(cur: Any, sql: GateSql, facts: GateFacts, fair_key: str | None,
           at: tuple[float, int], fair_keys: Callable[[str], FairKeys]) -> None:
    """Where the job stands: higher priorities, keys before its own, jobs before it."""
    queue, band = facts.job.queue, facts.band
    if cur.execute(sql.lined, (queue,)).fetchone() is None:
        facts.earlier = _count(cur, sql.before_plain, (queue, *at))
        return
    facts.higher = _count(cur, sql.higher, (queue, band))
    if band < 0:
        facts.higher += _count(cur, sql.plain_count, (queue,))
    facts.earlier = _count(cur, sql.before_lined, (queue, band, fair_key, *at))
    if band == 0 and fair_key is None:  # the plain jobs share the unkeyed turn, in arrival order
        facts.earlier += _count(cur, sql.before_plain, (queue, *at))
    facts.keys_before, facts.keys_before_count = keys_before(
        fair_keys(queue), band, fair_key or "", FAIR_KEYS_SHOWN)


def _breaker(row: Any, now: float) -> BreakerState | None:
    """The breaker of a ``breaker`` row when it holds jobs back."""
    if row is None or row[1] == CLOSED:
        return None
    failures = json.loads(row[2]) if isinstance(row[2], str) else list(row[2] or ())
    return BreakerRow(row[0], row[1], [float(t) for t in failures], float(row[3]), row[4],
                      row[5], row[6], row[7], int(row[8])).view(now)


def _count(cur: Any, statement: str, params: tuple[Any, ...]) -> int:
    row = cur.execute(statement, params).fetchone()
    return 0 if row is None else int(row[0])


def _parents(cur: Any, sql: GateSql, job_id: str) -> list[Holder]:
    """The workflow parents not settled yet."""
    row = cur.execute(sql.node, (job_id,)).fetchone()
    if row is None:
        return []
    parents = Node.from_wire(json.loads(row[0])).parents
    states = dict(cur.execute(sql.states, (sql.ids(list(parents)),)).fetchall())
    return [Holder(p, states[p]) for p in parents
            if p in states and JobState(states[p]) not in _DONE]


_DONE = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})
