"""The SQLite ``Inspector``: reads and operator actions for the CLI, web UI and metrics.

A part of ``SqliteStorage``, made over the same ``Database``, clock and wake-ups (pausing a
queue is ``flow.py``'s, schedules ``schedules.py``'s).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from typing import Any

from conveyor.core.clock import Clock
from conveyor.core.job import ALL_STATES, EventKind, JobRecord, JobState
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.graph import GraphNode, parents_of
from conveyor.storage.job_heads import HEAD_CHARS, JobHead
from conveyor.storage.queue_stats import QueueStats
from conveyor.storage.sqlite import batches, graph, jobs, readable
from conveyor.storage.sqlite.connection import Database, reads
from conveyor.storage.sqlite.graph import text_of
from conveyor.storage.sqlite.wakeup import Wakeup
from conveyor.storage.stored_data import StoredData
from conveyor.storage.totals import JobTotals, MinuteTotals, history_start, today_start
from conveyor.storage.workers import WorkerInfo

WORKER_TTL = 60.0
CANCEL_CHUNK = 500  # jobs per cancel_batch transaction (~10 ms of write lock)
_KNOWN_SET = frozenset(s.value for s in ALL_STATES)
_KNOWN = ", ".join(f"'{s.value}'" for s in ALL_STATES)
_RETRYABLE = ("dead", "failed", "cancelled", "retrying")
# Back to waiting by hand (a workflow node never released): unfinished, no lease, not ready.
_REWAIT = ("ready_at = NULL, finished_at = NULL, token = NULL, lease_expires_at = NULL, "
           "publish_at = NULL")


class SqliteInspector:
    """Reads and operator actions over one SQLite database."""

    def __init__(self, db: Database, clock: Clock, wakeup: Wakeup) -> None:
        self._db = db
        self._clock = clock
        self._wakeup = wakeup

    def now(self) -> float:
        """The storage's clock."""
        return self._clock.now()

    @reads
    def queues(self) -> list[QueueStats]:
        """Every known queue with sizes, latency, paused flag and totals."""
        db = self._db.read()
        now = self.now()
        sizes: dict[tuple[str, str], int] = {
            (q, s): n for q, s, n in db.execute(
                "SELECT queue, state, count(*) FROM jobs WHERE state IN "
                "('pending', 'scheduled', 'active', 'retrying', 'dead', 'waiting', "
                "'aggregating') "
                "GROUP BY queue, state"
            )
        }
        totals = {q: (p, f) for q, p, f in db.execute(
            "SELECT queue, sum(processed), sum(failed) + sum(dead) FROM job_totals GROUP BY queue"
        )}
        daily = {q: (p, f) for q, p, f in db.execute(
            "SELECT queue, sum(processed), sum(failed) + sum(dead) FROM minute_totals "
            "WHERE minute >= ? GROUP BY queue", (today_start(now),)
        )}
        out = []
        for name, paused in db.execute("SELECT name, paused FROM queues ORDER BY name"):
            oldest = db.execute(  # each index's oldest: the arrival order, the lineup's
                "SELECT min(t) FROM (SELECT (SELECT min(ready_at) FROM jobs INDEXED BY "
                "jobs_ready WHERE state = 'pending' AND lined = 0 AND queue = :q) AS t "
                "UNION ALL SELECT min(ready_at) FROM jobs WHERE state = 'pending' AND lined = 1 "
                "AND queue = :q)", {"q": name}
            ).fetchone()[0]
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
        row = self._db.read().execute(
            f"SELECT {readable.COLUMNS}, {readable.EVENTS} FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        return readable.record(row[:-1], row[-1]) if row else None

    @staticmethod
    def _filter(
        state: JobState | None, queue: str | None, batch_id: str | None
    ) -> tuple[str, list[Any]]:
        terms, params = [], []
        for column, value in (("state", state.value if state else None), ("queue", queue),
                              ("batch_id", batch_id)):
            if value is not None:
                terms.append(f"{column} = ?")
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
        extra = f", {readable.EVENTS}" if with_events else ""
        rows = self._db.read().execute(
            f"SELECT {readable.COLUMNS}{extra} FROM jobs{where} "
            # rowid is enqueue order: index order (either way), no sort
            f"ORDER BY rowid{' DESC' if newest_first else ''} LIMIT ? OFFSET ?",
            (*params, limit, offset),
        ).fetchall()
        if with_events:
            return [readable.record(r[:-1], r[-1]) for r in rows]
        return [readable.record(r) for r in rows]

    @reads
    def count_jobs(
        self, *, state: JobState | None = None, queue: str | None = None,
        batch_id: str | None = None,
    ) -> int:
        """How many jobs ``list_jobs`` would page through."""
        where, params = self._filter(state, queue, batch_id)
        return int(self._db.read().execute(
            f"SELECT count(*) FROM jobs{where}", params
        ).fetchone()[0])

    @reads
    def job_heads(self, *, state: JobState | None = None, queue: str | None = None,
                  offset: int = 0, limit: int = 50, chars: int = HEAD_CHARS) -> list[JobHead]:
        """See ``Inspector.job_heads``: ``substr`` of the payload and message, never more."""
        where, params = self._filter(state, queue, None)
        rows = self._db.read().execute(
            f"SELECT {readable.HEAD_COLUMNS} FROM jobs{where} ORDER BY rowid DESC "
            "LIMIT ? OFFSET ?", (chars, chars, *params, limit, offset)).fetchall()
        return [readable.head(row) for row in rows]

    def _select(self, cur: sqlite3.Cursor, ids: Sequence[str], states: Sequence[str],
                unknown: bool = False) -> list[Any]:
        """Rows (id, state, batch id) of the jobs in ``states`` (and, with ``unknown``, those
        in no known state: a damaged row). A batch id that is not UTF-8 reads as None."""
        where = "state IN (SELECT value FROM json_each(?))"
        if unknown:
            where = f"({where} OR state NOT IN ({_KNOWN}))"
        rows = cur.execute(
            "SELECT id, state, CAST(batch_id AS BLOB) FROM jobs "
            f"WHERE id IN (SELECT value FROM json_each(?)) AND {where}",
            (jobs.ids_param(ids), json.dumps(list(states))),
        ).fetchall()
        return [(i, s, _utf8_or_none(b)) for i, s, b in rows]

    def retry_jobs(self, job_ids: Sequence[str]) -> int:
        """Dead, failed, cancelled or retrying jobs → pending now; a workflow node never
        released → waiting, or left as it is (``storage/graph_retry.py``)."""
        with self._db.write() as cur:
            now = self.now()
            rows = self._select(cur, job_ids, _RETRYABLE)
            plan = graph.plan_retries(cur, [r[0] for r in rows if r[2]])
            waits = [r for r in rows if r[0] in plan.waiting]
            rows = [r for r in rows if r[0] not in plan.refused and r[0] not in plan.waiting]
            # attempt, errors and recoveries stay: they are the record of what happened
            # (docs/api.md, "Job lifecycle rules"), as on every other backend.
            moves = jobs.move(cur, now, rows, JobState.PENDING, EventKind.RETRIED,
                              sets=f"message = NULL, cancel_requested = 0, {jobs.REQUEUE}")
            moves += jobs.move(cur, now, waits, JobState.WAITING, EventKind.RETRIED,
                               sets=f"message = NULL, cancel_requested = 0, {_REWAIT}")
            batches.apply(cur, now, moves, jobs.insert)
        if rows or waits:
            self._wakeup.notify()
        return len(rows) + len(waits)

    def retry_refusals(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Of ``job_ids``, the workflow nodes a retry by hand leaves as they are, and why."""
        with self._db.write() as cur:
            rows = self._select(cur, job_ids, _RETRYABLE)
            return graph.plan_retries(cur, [r[0] for r in rows if r[2]]).refused

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete jobs that are not active."""
        with self._db.write() as cur:
            now = self.now()
            states = [s.value for s in ALL_STATES if s is not JobState.ACTIVE]
            rows = self._select(cur, job_ids, states, unknown=True)
            cur.execute("DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
                        (jobs.ids_param(r[0] for r in rows),))
            # A row in no known state is deleted without a counter to move (it had none).
            moves: list[batches.Move] = [(b, s, None) for _, s, b in rows
                                         if b and s in _KNOWN_SET]
            batches.apply(cur, now, moves, jobs.insert)
        return len(rows)

    def reseal(self, job_id: str, old: StoredData, new: StoredData) -> bool:
        """One compare-and-set ``UPDATE`` of payload, result and message."""
        with self._db.write() as cur:
            return jobs.reseal(cur, job_id, old, new)

    def kill_jobs(self, job_ids: Sequence[str]) -> int:
        """Waiting jobs → dead (``killed``)."""
        with self._db.write() as cur:
            now = self.now()
            rows = self._select(cur, job_ids, jobs.WAITING)
            moves = jobs.move(cur, now, rows, JobState.DEAD, EventKind.KILLED,
                              "killed by hand", f"message = :msg, {jobs.FINISH}")
            batches.apply(cur, now, moves, jobs.insert)
            # as blobs: a damaged row's name that is not UTF-8 is still counted, under U+FFFD
            jobs.add_totals(cur, now, Counter(
                (q.decode(errors="replace"), n.decode(errors="replace"), "dead")
                for q, n in cur.execute(
                    "SELECT CAST(queue AS BLOB), CAST(name AS BLOB) FROM jobs "
                    "WHERE id IN (SELECT value FROM json_each(?))",
                    (jobs.ids_param([r[0] for r in rows]),))))
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
            "SELECT info FROM workers WHERE last_seen >= ? ORDER BY id",
            (self.now() - WORKER_TTL,),
        ).fetchall()
        return [WorkerInfo.from_wire(json.loads(r[0])) for r in rows]

    def command_worker(self, worker_id: str, command: str) -> bool:
        """Queue ``quiet`` or ``stop`` for a worker."""
        if command not in ("quiet", "stop"):
            raise ValueError(f"unknown worker command {command!r}; expected 'quiet' or 'stop'")
        with self._db.write() as cur:
            return bool(cur.execute(
                "UPDATE workers SET command = ? WHERE id = ?", (command, worker_id)
            ).rowcount)

    @reads
    def get_batch(self, batch_id: str) -> BatchStatus | None:
        """Counters and timings of a batch."""
        row = self._db.read().execute(
            f"SELECT {batches.BATCH_COLUMNS} FROM batches WHERE id = ?", (batch_id,)
        ).fetchone()
        return batches.status_from_row(row) if row else None

    @reads
    def list_batches(self, offset: int = 0, limit: int = 50,
                     kind: str | None = None) -> list[BatchStatus]:
        """Batches (of one ``kind`` when given: "batch" or "workflow"), newest first."""
        where = "WHERE kind = ? " if kind is not None else ""
        rows = self._db.read().execute(
            f"SELECT {batches.BATCH_COLUMNS} FROM batches {where}"
            "ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?",
            (*([kind] if kind is not None else []), limit, offset),
        ).fetchall()
        return [batches.status_from_row(r) for r in rows]

    @reads
    def workflow_graph(self, workflow_id: str, limit: int = 2000) -> list[GraphNode]:
        """Up to ``limit`` nodes of a workflow, in id order, with their state and parents."""
        rows = self._db.read().execute(
            "SELECT jobs.id, CAST(name AS BLOB), state, wf_nodes.node FROM jobs JOIN wf_nodes "
            "ON wf_nodes.id = jobs.id WHERE jobs.batch_id = ? ORDER BY jobs.id LIMIT ?",
            (workflow_id, limit)).fetchall()
        return [GraphNode(r[0], text_of(r[1]) or "", JobState(r[2]),
                          parents_of(text_of(r[3])))
                for r in rows]

    def cancel_batch(self, batch_id: str) -> int:
        """Cancel every waiting job of a batch and request cancellation of its active ones."""
        with self._db.write() as cur:
            cur.execute("UPDATE batches SET cancelled = 1 WHERE id = ?", (batch_id,))
        # One transaction per chunk: workers' writes get the lock between them, instead of
        # waiting seconds for one transaction over a 200,000-job batch.
        # One state at a time, so each chunk is a range of the (batch_id, state) index in
        # rowid order: a seek, not a sort of every remaining job.
        done = 0
        for state in ("waiting", "aggregating", "scheduled", "pending", "retrying", "active"):
            after = 0
            while True:
                with self._db.write() as cur:
                    found = cur.execute(
                        "SELECT rowid, id, state, batch_id, cancel_requested FROM jobs "
                        "WHERE batch_id = ? AND state = ? AND rowid > ? "
                        "ORDER BY rowid LIMIT ?", (batch_id, state, after, CANCEL_CHUNK)
                    ).fetchall()
                    if not found:
                        break
                    after = found[-1][0]
                    jobs.cancel_rows(cur, self.now(), [r[1:] for r in found])
                    done += len(found)
        return done

    @reads
    def history(self, since: int = 0, queue: str | None = None) -> list[MinuteTotals]:
        """Outcomes per queue and minute of the last day, oldest first."""
        return [MinuteTotals(*row) for row in self._db.read().execute(
            "SELECT queue, minute, processed, failed, dead, retried FROM minute_totals "
            "WHERE minute >= ? AND (? IS NULL OR queue = ?) ORDER BY minute, queue",
            (history_start(self.now(), since), queue, queue),
        )]

    @reads
    def job_totals(self) -> list[JobTotals]:
        """All-time outcome counters per (queue, job name)."""
        return [JobTotals(*row) for row in self._db.read().execute(
            "SELECT queue, name, processed, failed, dead, retried FROM job_totals "
            "ORDER BY queue, name"
        )]


def _utf8_or_none(value: bytes | None) -> str | None:
    try:
        return value.decode() if value is not None else None
    except UnicodeDecodeError:
        return None
