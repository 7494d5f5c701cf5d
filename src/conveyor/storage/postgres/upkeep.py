"""The transitions workers make on the side: promotion of due jobs, recovery of lost leases
(expired, or a dead worker's), cancel, batch creation and closing, and retention trimming.

A mixin of ``PostgresStorage``; each method is one transaction. Rows are picked with ``FOR
UPDATE SKIP LOCKED``, so two workers' pollers and recoverers never wait on each other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from conveyor.job import BatchSpec, EventKind, JobState
from conveyor.storage.postgres import batches, jobs
from conveyor.storage.postgres.inspect import PostgresInspector
from conveyor.storage.postgres.text import enc
from conveyor.storage.records import Retention
from conveyor.storage.rules import LEASE_EXPIRED, WORKER_DIED, cancelled_message

_PROMOTE = (
    "SELECT id, state, batch_id FROM jobs WHERE state IN ('scheduled', 'retrying') "
    "AND run_at <= %s ORDER BY run_at LIMIT %s FOR UPDATE SKIP LOCKED"
)
_RECLAIM = (
    "SELECT id, state, batch_id, recoveries, queue, name, cancel_requested FROM jobs "
    "WHERE state = 'active' AND (lease_expires_at <= %(now)s OR lease_expires_at IS NULL) "
    "LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
)
# The jobs one worker holds (``release_worker``): waits for rows an ack is writing, so a
# job the dead worker acknowledged just before dying is not recovered as well.
_HELD = (
    "SELECT id, state, batch_id, recoveries, queue, name, cancel_requested FROM jobs "
    "WHERE state = 'active' AND worker = %s ORDER BY id FOR UPDATE"
)
_TRIM = "DELETE FROM jobs WHERE state = %s AND finished_at < %s"


class PostgresUpkeep(PostgresInspector):
    """Promotion, recovery, cancel, batches and trimming over one schema."""

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time has come → pending."""
        with self._db.write() as cur:
            now = self._now(cur)
            rows = cur.execute(_PROMOTE, (now, limit)).fetchall()
            moves = jobs.move(cur, now, rows, JobState.PENDING, EventKind.ENQUEUED,
                              sets="ready_at = %(now)s")
            batches.apply(cur, now, moves)
        return len(rows)

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Active jobs with an expired or missing lease → pending (or dead: a poison job)."""
        with self._db.write() as cur:
            now = self._now(cur)
            rows = cur.execute(_RECLAIM, {"now": now, "limit": limit}).fetchall()
            _recover(cur, now, rows, max_recoveries, LEASE_EXPIRED)
        return len(rows)

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        with self._db.write() as cur:
            now = self._now(cur)
            rows = cur.execute(_HELD, (enc(worker_id),)).fetchall()
            _recover(cur, now, rows, max_recoveries, WORKER_DIED)
            cur.execute("DELETE FROM workers WHERE id = %s", (enc(worker_id),))
        return len(rows)

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


def _recover(cur: Any, now: float, rows: Sequence[Any], max_recoveries: int,
             why: str) -> int:
    """Recover active jobs selected as ``_RECLAIM`` does (a lost attempt: pending again, dead
    past ``max_recoveries``, cancelled on request); returns how many went back to pending."""
    back = [r[:3] for r in rows if r[3] + 1 <= max_recoveries and not r[6]]
    moves = jobs.move(cur, now, back, JobState.PENDING, EventKind.RECOVERED,
                      why, f"recoveries = recoveries + 1, {jobs.REQUEUE}")
    # A cancel request was made: the lost attempt ends the job, as an error would.
    moves += jobs.move(cur, now, [r[:3] for r in rows if r[6]], JobState.CANCELLED,
                       EventKind.CANCELLED, cancelled_message(why),
                       "recoveries = recoveries + 1, message = %(msg)s, "
                       "finished_at = %(now)s, token = NULL, lease_expires_at = NULL")
    for r in rows:
        if r[3] + 1 > max_recoveries and not r[6]:
            moves += jobs.move(
                cur, now, [r[:3]], JobState.DEAD, EventKind.DEAD,
                f"recovered {r[3] + 1} times (poison job?)",
                f"recoveries = recoveries + 1, message = %(msg)s, {jobs.FINISH}",
            )
    dead = Counter((r[4], r[5], "dead") for r in rows
                   if r[3] + 1 > max_recoveries and not r[6])
    if dead:
        jobs.add_totals(cur, now, dead)
    batches.apply(cur, now, moves)
    return len(back)
