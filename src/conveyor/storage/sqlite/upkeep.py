"""The transitions workers make on the side, on SQLite: promotion of due jobs, recovery of lost
leases (expired, or a dead worker's), cancel, batch creation and closing, and retention
trimming. A part of ``SqliteStorage``; each method is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from conveyor.core.clock import Clock
from conveyor.core.job import BatchSpec, EventKind, JobState
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.retention import Retention
from conveyor.storage.rules import LEASE_EXPIRED, WORKER_DIED
from conveyor.storage.sqlite import batches, graph, groups, jobs, lineup
from conveyor.storage.sqlite import leases as lease_sql
from conveyor.storage.sqlite.connection import Database
from conveyor.storage.sqlite.wakeup import Wakeup
from conveyor.storage.totals import history_start

# Hinted: the planner otherwise sorts every scheduled job by run_at.
_PROMOTE = (
    "SELECT id, state, batch_id FROM jobs INDEXED BY jobs_due "
    "WHERE state IN ('scheduled', 'retrying') AND run_at <= ? ORDER BY run_at LIMIT ?"
)
# Hinted: the planner otherwise walks every finished job of the state.
_TRIM = "DELETE FROM jobs INDEXED BY jobs_finished WHERE finished_at < ? AND state = ?"


class SqliteUpkeep:
    """Promotion, recovery, cancel, batches and trimming over one database."""

    def __init__(self, db: Database, clock: Clock, wakeup: Wakeup) -> None:
        self._db = db
        self._clock = clock
        self._wakeup = wakeup

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time has come → pending."""
        with self._db.write() as cur:
            now = self._clock.now()
            rows = cur.execute(_PROMOTE, (now, limit)).fetchall()
            ready, back = groups.promote(cur, now, rows) if rows else (rows, [])
            moves = jobs.move(cur, now, ready, JobState.PENDING, EventKind.ENQUEUED,
                              sets="ready_at = :now")
            moves += jobs.move(cur, now, back, JobState.AGGREGATING, EventKind.ENQUEUED,
                               sets="ready_at = :now")
            batches.apply(cur, now, moves, jobs.insert)
            leads = groups.flush(cur, now, limit)
            lineup.age(cur, now, limit)
        if ready or leads:
            self._wakeup.notify()
        return len(rows) + leads

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Active jobs with an expired or missing lease → pending (or dead: a poison job)."""
        with self._db.write() as cur:
            now = self._clock.now()
            rows = lease_sql.decoded_rows(cur, lease_sql.RECLAIM, {"now": now, "limit": limit})
            back = lease_sql.recover(cur, now, rows, max_recoveries, LEASE_EXPIRED)
        if back:
            self._wakeup.notify()
        return len(rows)

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        with self._db.write() as cur:
            now = self._clock.now()
            rows = lease_sql.decoded_rows(cur, lease_sql.HELD, (worker_id,))
            back = lease_sql.recover(cur, now, rows, max_recoveries, WORKER_DIED)
            cur.execute("DELETE FROM workers WHERE id = ?", (worker_id,))
        if back:
            self._wakeup.notify()
        return len(rows)

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one."""
        with self._db.write() as cur:
            now = self._clock.now()
            return jobs.cancel(cur, now, job_id)

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch."""
        with self._db.write() as cur:
            batches.create(cur, self._clock.now(), spec)

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch fully enqueued; complete it now if every job is already terminal."""
        with self._db.write() as cur:
            batches.close(cur, self._clock.now(), batch_id, jobs.insert)
        self._wakeup.notify()

    def batch_finished(self, batch_id: str) -> AbstractContextManager[BatchWaiter]:
        """Wake-ups when the batch may have finished (``batches.finished_waiter``)."""
        return batches.finished_waiter(self._db.read, self._wakeup, batch_id)

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, batches and silent workers past retention."""
        removed = 0
        with self._db.write() as cur:
            now = self._clock.now()
            for state, keep in (("succeeded", retention.succeeded_seconds),
                                ("failed", retention.failed_seconds),
                                ("dead", retention.dead_seconds),
                                ("cancelled", retention.failed_seconds)):
                removed += cur.execute(_TRIM, (now - keep, state)).rowcount
            removed += cur.execute(
                "DELETE FROM jobs WHERE state = 'dead' AND id IN (SELECT id FROM jobs "
                "WHERE state = 'dead' ORDER BY finished_at DESC LIMIT -1 OFFSET ?)",
                (retention.dead_max,),
            ).rowcount
            cur.execute(
                f"DELETE FROM batches WHERE finished_at < ? AND {batches.TERMINAL_SUM} >= total",
                (now - retention.batch_seconds,),
            )
            cur.execute("DELETE FROM workers WHERE last_seen < ?", (now - retention.worker_ttl,))
            cur.execute("DELETE FROM minute_totals WHERE minute < ?", (history_start(now),))
            graph.trim(cur)
            # Hits of keys still in use are pruned at dequeue; this drops abandoned keys.
            cur.execute("DELETE FROM rate_hits WHERE ts < ?", (now - retention.succeeded_seconds,))
            cur.execute(
                "DELETE FROM unique_locks WHERE until < ? AND NOT EXISTS (SELECT 1 FROM jobs "
                "WHERE jobs.id = unique_locks.job_id AND state NOT IN "
                "('succeeded', 'failed', 'dead', 'cancelled'))",
                (now,),
            )
        return removed
