"""SQLite's ``Inspector.gate_facts``: ``storage/gate_reads.py`` over the rows and indexes its
``dequeue`` decides by (``flow.py``, ``lineup.py``: the turn order is the walk's own reads)."""

from __future__ import annotations

import json

from conveyor.core.clock import Clock
from conveyor.storage.gate_reads import GateSql, read_gate_facts
from conveyor.storage.gates import GateFacts
from conveyor.storage.lineup import FairKeys
from conveyor.storage.sqlite import flow
from conveyor.storage.sqlite.connection import Database, reads
from conveyor.storage.sqlite.inspect import SqliteInspector
from conveyor.storage.sqlite.lineup import LINED, SqliteLineup

__all__ = ["SqliteGates"]

_SQL = GateSql(
    job=("SELECT lined, priority, fair_key, age_next, ready_at, rowid, publish_at, "
         "concurrency_key, order_key, rate_key, rate_period FROM jobs WHERE id = ?"),
    paused="SELECT 1 FROM queues WHERE name = ? AND paused = 1",
    holders=("SELECT id, started_at, cost FROM jobs WHERE state = 'active' "
             "AND concurrency_key = ?"),
    order_first=("SELECT id, state, started_at, run_at FROM jobs WHERE order_key = ? "  # as flow
                 "AND state IN ('pending', 'active', 'retrying') ORDER BY rowid LIMIT 1"),
    rates="SELECT ts FROM rate_hits WHERE key = ? AND ts > ?",
    group="SELECT size, flush_at FROM agg_groups WHERE queue = ? AND name = ? AND key = ?",
    lined=LINED,
    before_plain=("SELECT count(*) FROM jobs INDEXED BY jobs_ready WHERE state = 'pending' "
                  "AND lined = 0 AND queue = ? AND (ready_at, rowid) < (?, ?)"),
    before_lined=("SELECT count(*) FROM jobs INDEXED BY jobs_lineup WHERE state = 'pending' "
                  "AND lined = 1 AND queue = ? AND priority = ? AND fair_key IS ? "
                  "AND (ready_at, rowid) < (?, ?)"),
    higher=("SELECT count(*) FROM jobs INDEXED BY jobs_lineup WHERE state = 'pending' "
            "AND lined = 1 AND queue = ? AND priority > ?"),
    plain_count=("SELECT count(*) FROM jobs INDEXED BY jobs_ready WHERE state = 'pending' "
                 "AND lined = 0 AND queue = ?"),
    node="SELECT node FROM wf_nodes WHERE id = ?",
    states="SELECT id, state FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
    ids=json.dumps,
    breaker="SELECT key, state, failures, within, opened_at, probe_at, probe_id, reason, trips "
            "FROM breakers WHERE key = ?",
)


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
        now = self._clock.now()

        def fair_keys(queue: str) -> FairKeys:
            return SqliteLineup(cur, now, queue, flow.Gates())

        return read_gate_facts(cur, _SQL, record, now, fair_keys, place)
