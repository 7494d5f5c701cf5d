"""PostgreSQL's ``Inspector.gate_facts``: ``storage/gate_reads.py`` over the rows, indexes and
functions its ``dequeue`` decides by (``functions/gate_check.sql``, ``lineup_pick.sql``: the
turn order is read through ``lineup_next`` itself; a job's breaker is its ``breakers`` row)."""

from __future__ import annotations

from typing import Any

import psycopg

from conveyor.storage.gate_reads import GateSql, read_gate_facts
from conveyor.storage.gates import GateFacts
from conveyor.storage.postgres.breakers import COLUMNS
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Database, reads
from conveyor.storage.postgres.inspect import PostgresInspector

__all__ = ["PostgresGates"]

Cursor = psycopg.Cursor[Any]

# Each count names its index's predicate (jobs_ready: plain jobs; jobs_lineup: lined ones).
_SQL = GateSql(
    job=("SELECT lined, priority, fair_key, age_next, ready_at, seq, publish_at, "
         "concurrency_key, order_key, rate_key, rate_period FROM jobs WHERE id = %s"),
    paused="SELECT 1 FROM queues WHERE name = %s AND paused",
    holders=("SELECT id, started_at, cost FROM jobs WHERE state = 'active' "
             "AND concurrency_key = %s"),
    order_first=("SELECT id, state, started_at, run_at FROM jobs WHERE order_key = %s "
                 "AND state IN ('pending', 'active', 'retrying') "
                 "AND octet_length(order_key) <= 512 ORDER BY seq LIMIT 1"),  # as gate_check
    rates="SELECT ts FROM rate_hits WHERE key = %s AND ts > %s",
    group="SELECT size, flush_at FROM agg_groups WHERE queue = %s AND name = %s AND key = %s",
    lined="SELECT 1 FROM jobs WHERE state = 'pending' AND lined AND queue = %s LIMIT 1",
    before_plain=("SELECT count(*) FROM jobs WHERE state = 'pending' AND NOT lined "
                  "AND queue = %s AND (ready_at, seq) < (%s, %s)"),
    before_lined=("SELECT count(*) FROM jobs WHERE state = 'pending' AND lined AND queue = %s "
                  "AND priority = %s AND fair_key IS NOT DISTINCT FROM %s "
                  "AND (ready_at, seq) < (%s, %s)"),
    higher=("SELECT count(*) FROM jobs WHERE state = 'pending' AND lined AND queue = %s "
            "AND priority > %s"),
    plain_count="SELECT count(*) FROM jobs WHERE state = 'pending' AND NOT lined AND queue = %s",
    node="SELECT node FROM wf_nodes WHERE id = %s",
    states="SELECT id, state FROM jobs WHERE id = ANY(%s::text[])",
    ids=list,
    breaker=f"SELECT {COLUMNS} FROM breakers WHERE key = %s",
)


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
        return read_gate_facts(cur, _SQL, record, self._clock.now(),
                               lambda queue: _FairKeys(cur, queue), place)


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
