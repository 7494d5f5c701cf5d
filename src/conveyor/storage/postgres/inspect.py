"""The PostgreSQL ``Inspector``: reads and operator actions for the CLI, web UI and metrics.

A part of ``PostgresStorage``, made over the same ``Database`` and clock (pausing a queue is
``flow.py``'s, schedules ``schedules.py``'s).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from conveyor.core.job import ALL_STATES, EventKind, JobRecord, JobState
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.graph import GraphNode, parents_of
from conveyor.storage.job_heads import HEAD_CHARS, JobHead
from conveyor.storage.postgres import batches, graph, jobs
from conveyor.storage.postgres.cancel import WAITING, cancel_rows
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Database, reads
from conveyor.storage.postgres.text import dec, enc
from conveyor.storage.queue_stats import QueueStats
from conveyor.storage.stored_data import StoredData
from conveyor.storage.totals import JobTotals, MinuteTotals, history_start, today_start
from conveyor.storage.workers import WorkerInfo

WORKER_TTL = 60.0
# One count per state, each over the partial index that holds that state's jobs (a single
# `state IN (...)` would read the whole table, finished jobs included); pending jobs on two,
# jobs_ready and the lineup's jobs_lineup (migration 022).
_SIZES = "SELECT queue, state, sum(n)::bigint FROM (" + " UNION ALL ".join(
    f"SELECT queue, state, count(*) AS n FROM jobs WHERE {where} GROUP BY queue, state"
    for where in ("state = 'pending' AND NOT lined", "state = 'pending' AND lined",
                  "state = 'active'", "state IN ('scheduled', 'retrying')",
                  "state = 'dead'", "state = 'waiting'", "state = 'aggregating'")
) + ") AS s GROUP BY queue, state"
# The oldest pending job of a queue: each index's oldest (the arrival order, the lineup's).
_OLDEST = ("SELECT least((SELECT min(ready_at) FROM jobs WHERE state = 'pending' AND NOT lined "
           "AND queue = %(q)s), (SELECT min(ready_at) FROM jobs WHERE state = 'pending' "
           "AND lined AND queue = %(q)s))")
CANCEL_CHUNK = 500  # jobs per cancel_batch transaction: row locks held briefly
_KNOWN_SET = frozenset(s.value for s in ALL_STATES)
_KNOWN = ", ".join(f"'{s.value}'" for s in ALL_STATES)
_RETRYABLE = ("dead", "failed", "cancelled", "retrying")
# Back to waiting by hand (a workflow node never released): unfinished, no lease, not ready.
_REWAIT = ("ready_at = NULL, finished_at = NULL, token = NULL, lease_expires_at = NULL, "
           "publish_at = NULL")
Cursor = psycopg.Cursor[Any]


class PostgresInspector:
    """Reads and operator actions over one PostgreSQL schema."""

    def __init__(self, db: Database, clock: ServerClock) -> None:
        self._db = db
        self._clock = clock

    def now(self) -> float:
        """The storage's clock (``ServerClock``)."""
        return self._clock.now()

    @reads
    def queues(self) -> list[QueueStats]:
        """Every known queue with sizes, latency, paused flag and totals."""
        db = self._db.read()
        now = self.now()
        sizes: dict[tuple[str, str], int] = {
            (q, s): n for q, s, n in db.execute(_SIZES)
        }
        totals = {q: (p, f) for q, p, f in db.execute(
            "SELECT queue, sum(processed), sum(failed) + sum(dead) FROM job_totals GROUP BY queue"
        )}
        daily = {q: (p, f) for q, p, f in db.execute(
            "SELECT queue, sum(processed)::bigint, (sum(failed) + sum(dead))::bigint "
            "FROM minute_totals WHERE minute >= %s GROUP BY queue", (today_start(now),)
        )}
        out = []
        for name, paused in db.execute("SELECT name, paused FROM queues ORDER BY name"):
            oldest = (db.execute(_OLDEST, {"q": name}).fetchone() or (None,))[0]
            out.append(QueueStats(
                name=name, pending=sizes.get((name, "pending"), 0),
                scheduled=sizes.get((name, "scheduled"), 0),
                active=sizes.get((name, "active"), 0),
                retrying=sizes.get((name, "retrying"), 0),
                latency=max(0.0, now - oldest) if oldest is not None else 0.0,
                paused=bool(paused), processed=totals.get(name, (0, 0))[0],
                failed=totals.get(name, (0, 0))[1], dead=sizes.get((name, "dead"), 0),
                processed_today=daily.get(name, (0, 0))[0],
                failed_today=daily.get(name, (0, 0))[1],
                waiting=sizes.get((name, "waiting"), 0),
                aggregating=sizes.get((name, "aggregating"), 0),
            ))
        return out

    @reads
    def get_job(self, job_id: str) -> JobRecord | None:
        """A job with its full event log, or None."""
        row = self._db.read().execute(jobs.GET_JOB, (job_id,)).fetchone()
        return jobs.record(row[:-1], row[-1]) if row else None

    @staticmethod
    def _filter(
        state: JobState | None, queue: str | None, batch_id: str | None
    ) -> tuple[str, list[Any]]:
        terms, params = [], []
        for column, value in (("state", state.value if state else None), ("queue", queue),
                              ("batch_id", batch_id)):
            if value is not None:
                terms.append(f"{column} = %s")
                params.append(value)
        return (" WHERE " + " AND ".join(terms) if terms else ""), params

    @reads
    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        batch_id: str | None = None,
        offset: int = 0,
        limit: int = 50,
        with_events: bool = False,
        newest_first: bool = False,
    ) -> list[JobRecord]:
        """Jobs filtered by state/queue/batch, oldest first, paged."""
        where, params = self._filter(state, queue, batch_id)
        extra = ", events" if with_events else ""
        rows = self._db.read().execute(
            f"SELECT {jobs.JOB_COLUMNS}{extra} FROM jobs{where} "
            f"ORDER BY seq{' DESC' if newest_first else ''} LIMIT %s OFFSET %s",  # enqueue order
            (*params, limit, offset),
        ).fetchall()
        if with_events:
            return [jobs.record(r[:-1], r[-1]) for r in rows]
        return [jobs.record(r) for r in rows]

    @reads
    def count_jobs(
        self, *, state: JobState | None = None, queue: str | None = None,
        batch_id: str | None = None,
    ) -> int:
        """How many jobs ``list_jobs`` would page through."""
        where, params = self._filter(state, queue, batch_id)
        return int((self._db.read().execute(
            f"SELECT count(*) FROM jobs{where}", params
        ).fetchone() or (0,))[0])

    @reads
    def job_heads(self, *, state: JobState | None = None, queue: str | None = None,
                  offset: int = 0, limit: int = 50, chars: int = HEAD_CHARS) -> list[JobHead]:
        """See ``Inspector.job_heads``. ``substr`` (not ``left``) of a long value reads only
        the slice it returns from the TOAST table."""
        where, params = self._filter(state, queue, None)
        rows = self._db.read().execute(
            "SELECT id, name, queue, state, created_at, substr(payload, 1, %s), "
            f"substr(message, 1, %s) FROM jobs{where} ORDER BY seq DESC LIMIT %s OFFSET %s",
            (chars, chars, *params, limit, offset)).fetchall()
        return [JobHead(id=r[0], name=r[1], queue=r[2],
                        state=next((s for s in JobState if s.value == r[3]), None),
                        created_at=float(r[4]), payload=r[5], message=dec(r[6]) or "")
                for r in rows]

    def _select(self, cur: Cursor, ids: Sequence[str], states: Sequence[str],
                unknown: bool = False) -> list[Any]:
        """Rows (id, state, batch id) of the jobs in ``states`` (and, with ``unknown``, those
        in no known state: a damaged row), locked for this transaction."""
        where = "state = ANY(%s)"
        if unknown:
            where = f"({where} OR state NOT IN ({_KNOWN}))"
        return cur.execute(
            f"SELECT id, state, batch_id FROM jobs WHERE id = ANY(%s) AND {where} "
            "ORDER BY id FOR UPDATE",
            (sorted(set(ids)), list(states)),
        ).fetchall()

    def retry_jobs(self, job_ids: Sequence[str]) -> int:
        """Dead, failed, cancelled or retrying jobs → pending now; a workflow node never
        released → waiting, or left as it is (``storage/graph_retry.py``)."""
        with self._db.write() as cur:
            now = self._clock.at(cur)
            rows = self._select(cur, job_ids, _RETRYABLE)
            plan = graph.plan_retries(cur, [r[0] for r in rows if r[2]])
            waits = [r for r in rows if r[0] in plan.waiting]
            rows = [r for r in rows if r[0] not in plan.refused and r[0] not in plan.waiting]
            # attempt, errors and recoveries stay: they are the record of what happened
            # (docs/api.md, "Job lifecycle rules"), as on every other backend.
            moves = jobs.move(cur, now, rows, JobState.PENDING, EventKind.RETRIED,
                              sets=f"message = NULL, cancel_requested = false, {jobs.REQUEUE}")
            moves += jobs.move(cur, now, waits, JobState.WAITING, EventKind.RETRIED,
                               sets=f"message = NULL, cancel_requested = false, {_REWAIT}")
            batches.apply(cur, now, moves)
            graph.settle(cur, now)
        return len(rows) + len(waits)

    def retry_refusals(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Of ``job_ids``, the workflow nodes a retry by hand leaves as they are, and why."""
        with self._db.write() as cur:
            rows = self._select(cur, job_ids, _RETRYABLE)
            return graph.plan_retries(cur, [r[0] for r in rows if r[2]]).refused

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete jobs that are not active."""
        with self._db.write() as cur:
            now = self._clock.at(cur)
            states = [s.value for s in ALL_STATES if s is not JobState.ACTIVE]
            rows = self._select(cur, job_ids, states, unknown=True)
            cur.execute("DELETE FROM jobs WHERE id = ANY(%s)", ([r[0] for r in rows],))
            # A row in no known state is deleted without a counter to move (it had none).
            moves: list[batches.Move] = [(b, s, None) for _, s, b in rows
                                         if b and s in _KNOWN_SET]
            batches.apply(cur, now, moves)
            graph.settle(cur, now)
        return len(rows)

    def reseal(self, job_id: str, old: StoredData, new: StoredData) -> bool:
        """One compare-and-set ``UPDATE`` of payload, result and message."""
        with self._db.write() as cur:
            return jobs.reseal(cur, job_id, old, new)

    def kill_jobs(self, job_ids: Sequence[str]) -> int:
        """Waiting jobs → dead (``killed``)."""
        with self._db.write() as cur:
            now = self._clock.at(cur)
            rows = self._select(cur, job_ids, WAITING)
            moves = jobs.move(cur, now, rows, JobState.DEAD, EventKind.KILLED,
                              "killed by hand", f"message = %(msg)s, {jobs.FINISH}")
            batches.apply(cur, now, moves)
            cur.execute("SELECT add_totals(%s, array_agg(queue), array_agg(name), "
                        "array_agg('dead'::text)) FROM jobs WHERE id = ANY(%s)",
                        (now, [r[0] for r in rows]))
            graph.settle(cur, now)
        return len(rows)

    @reads
    def _ids_in(self, state: JobState, queue: str | None) -> list[str]:
        where, params = self._filter(state, queue, None)
        return [r[0] for r in self._db.read().execute(f"SELECT id FROM jobs{where}", params)]

    def retry_all(self, state: JobState = JobState.DEAD, queue: str | None = None) -> int:
        """Retry every job in ``state``."""
        return self.retry_jobs(self._ids_in(state, queue))

    def clear(self, state: JobState = JobState.DEAD, queue: str | None = None) -> int:
        """Delete every job in a terminal ``state``."""
        if not JobState(state).terminal:
            raise ValueError(f"clear() deletes finished jobs only, not {JobState(state).value!r}")
        return self.delete_jobs(self._ids_in(state, queue))

    @reads
    def workers(self) -> list[WorkerInfo]:
        """Workers seen within the registry's time-to-live."""
        rows = self._db.read().execute(
            "SELECT info FROM workers WHERE last_seen >= %s ORDER BY id",
            (self.now() - WORKER_TTL,),
        ).fetchall()
        return [WorkerInfo.from_wire(json.loads(r[0])) for r in rows]

    def command_worker(self, worker_id: str, command: str) -> bool:
        """Queue ``quiet`` or ``stop`` for a worker."""
        if command not in ("quiet", "stop"):
            raise ValueError(f"unknown worker command {command!r}; expected 'quiet' or 'stop'")
        with self._db.write() as cur:
            return bool(cur.execute(
                "UPDATE workers SET command = %s WHERE id = %s", (command, enc(worker_id))
            ).rowcount)

    @reads
    def get_batch(self, batch_id: str) -> BatchStatus | None:
        """Counters and timings of a batch."""
        row = self._db.read().execute(
            f"SELECT {batches.BATCH_COLUMNS} FROM {batches.BATCH_FROM} WHERE id = %s", (batch_id,)
        ).fetchone()
        return batches.status_from_row(row) if row else None

    @reads
    def list_batches(self, offset: int = 0, limit: int = 50,
                     kind: str | None = None) -> list[BatchStatus]:
        """Batches (of one ``kind`` when given: "batch" or "workflow"), newest first."""
        where = "WHERE kind = %s " if kind is not None else ""
        rows = self._db.read().execute(
            f"SELECT {batches.BATCH_COLUMNS} FROM {batches.BATCH_FROM} {where}"
            "ORDER BY created_at DESC, seq DESC LIMIT %s OFFSET %s",
            (*([kind] if kind is not None else []), limit, offset),
        ).fetchall()
        return [batches.status_from_row(r) for r in rows]

    @reads
    def workflow_graph(self, workflow_id: str, limit: int = 2000) -> list[GraphNode]:
        """Up to ``limit`` nodes of a workflow, in id order, with their state and parents."""
        rows = self._db.read().execute(
            "SELECT jobs.id, name, state, wf_nodes.node FROM jobs JOIN wf_nodes "
            "ON wf_nodes.id = jobs.id WHERE jobs.batch_id = %s ORDER BY jobs.id LIMIT %s",
            (workflow_id, limit)).fetchall()
        return [GraphNode(r[0], dec(r[1]) or "", JobState(r[2]), parents_of(r[3])) for r in rows]

    def cancel_batch(self, batch_id: str) -> int:
        """Cancel every waiting job of a batch and request cancellation of its active ones."""
        with self._db.write() as cur:
            cur.execute("UPDATE batches SET cancelled = true WHERE id = %s", (batch_id,))
        # One transaction per chunk: workers' acks of the batch's jobs wait on row locks
        # for one chunk at most, not for one transaction over a 200,000-job batch.
        # One state at a time, so each chunk is a range of the (batch_id, state, seq) index.
        done = 0
        for state in ("waiting", "aggregating", "scheduled", "pending", "retrying", "active"):
            after = 0
            while True:
                with self._db.write() as cur:
                    found = cur.execute(
                        "SELECT seq, id, state, batch_id, cancel_requested FROM jobs "
                        "WHERE batch_id = %s AND state = %s AND seq > %s "
                        "ORDER BY seq LIMIT %s FOR UPDATE", (batch_id, state, after, CANCEL_CHUNK)
                    ).fetchall()
                    if not found:
                        break
                    after = found[-1][0]
                    cancel_rows(cur, self._clock.at(cur), [r[1:] for r in found])
                    done += len(found)
        return done

    @reads
    def history(self, since: int = 0, queue: str | None = None) -> list[MinuteTotals]:
        """Outcomes per queue and minute of the last day, oldest first."""
        return [MinuteTotals(*row) for row in self._db.read().execute(
            "SELECT queue, minute, processed, failed, dead, retried FROM minute_totals "
            "WHERE minute >= %s AND (%s::text IS NULL OR queue = %s) ORDER BY minute, queue",
            (history_start(self.now(), since), queue, queue),
        )]

    @reads
    def job_totals(self) -> list[JobTotals]:
        """All-time outcome counters per (queue, job name)."""
        return [JobTotals(*row) for row in self._db.read().execute(
            "SELECT queue, name, processed, failed, dead, retried FROM job_totals "
            "ORDER BY queue, name"
        )]
