"""The transitions workers make on the side: promotion of due jobs, recovery of lost leases
(expired, or a dead worker's), cancel, batch creation and closing, and retention trimming.

A mixin of ``PostgresStorage``; each method is one transaction. Promotion and recovery are one
call of a server-side function each (migrations/002_functions.sql), picking rows ``FOR UPDATE
SKIP LOCKED``, so two workers' pollers and recoverers never wait on each other.
"""

from __future__ import annotations

from conveyor.job import BatchSpec, JobState
from conveyor.storage.postgres import batches
from conveyor.storage.postgres.inspect import PostgresInspector
from conveyor.storage.postgres.text import enc
from conveyor.storage.records import Retention
from conveyor.storage.rules import LEASE_EXPIRED, WORKER_DIED, cancelled_message

_TRIM = "DELETE FROM jobs WHERE state = %s AND finished_at < %s"


class PostgresUpkeep(PostgresInspector):
    """Promotion, recovery, cancel, batches and trimming over one schema."""

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time has come → pending (server-side
        ``promote``: one round trip)."""
        with self._db.call() as cur:
            row = cur.execute("SELECT promote(%s::float8, %s::int4)",
                              (self._clock_arg(), limit)).fetchone()
        return int(row[0]) if row else 0

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Active jobs with an expired or missing lease → pending (or dead: a poison job)."""
        with self._db.call() as cur:
            row = cur.execute(
                "SELECT reclaim(%s::float8, %s::int4, %s::int4, %s::text, %s::text)",
                (self._clock_arg(), max_recoveries, limit, LEASE_EXPIRED,
                 cancelled_message(LEASE_EXPIRED))).fetchone()
        return int(row[0]) if row else 0

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        with self._db.call() as cur:
            row = cur.execute(
                "SELECT release_worker(%s::float8, %s::text, %s::int4, %s::text, %s::text)",
                (self._clock_arg(), enc(worker_id), max_recoveries, WORKER_DIED,
                 cancelled_message(WORKER_DIED))).fetchone()
        return int(row[0]) if row else 0

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one."""
        with self._db.write() as cur:
            return self._cancel(cur, self._now(cur), job_id)

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch."""
        with self._db.write() as cur:
            batches.create(cur, self._now(cur), spec)

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch fully enqueued; complete it now if every job is already terminal."""
        with self._db.write() as cur:
            batches.close(cur, self._clock_arg(), batch_id)

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, batches and silent workers past retention."""
        removed = 0
        with self._db.write() as cur:
            now = self._now(cur)
            for state, keep in (("succeeded", retention.succeeded_seconds),
                                ("failed", retention.failed_seconds),
                                ("dead", retention.dead_seconds),
                                ("cancelled", retention.failed_seconds)):
                removed += cur.execute(_TRIM, (state, now - keep)).rowcount
            removed += cur.execute(
                "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = 'dead' "
                "AND finished_at IS NOT NULL ORDER BY finished_at DESC OFFSET %s)",
                (retention.dead_max,),
            ).rowcount
            cur.execute(
                f"DELETE FROM batches WHERE finished_at < %s AND {batches.TERMINAL_SUM} >= total",
                (now - retention.batch_seconds,),
            )
            cur.execute("DELETE FROM workers WHERE last_seen < %s",
                        (now - retention.worker_ttl,))
            # Hits of keys still in use are pruned at dequeue; this drops abandoned keys.
            cur.execute("DELETE FROM rate_hits WHERE ts < %s",
                        (now - retention.succeeded_seconds,))
            cur.execute(
                "DELETE FROM unique_locks WHERE until < %s AND NOT EXISTS (SELECT 1 FROM jobs "
                "WHERE jobs.id = unique_locks.job_id AND state NOT IN "
                "('succeeded', 'failed', 'dead', 'cancelled'))",
                (now,),
            )
        return removed

