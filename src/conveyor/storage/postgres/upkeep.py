"""The transitions workers make on the side: promotion of due jobs, recovery of lost leases
(expired, or a dead worker's), cancel, batch creation and closing, and retention trimming.

A part of ``PostgresStorage``; each method is one transaction, but trimming, which is several
short ones of bounded size. Promotion and recovery are one call of a server-side function each
(functions/promote.sql, reclaim.sql), picking rows ``FOR UPDATE SKIP LOCKED``, so two workers'
pollers and recoverers never wait on each other.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from conveyor.core.job import BatchSpec, JobState
from conveyor.storage.batch_wait import BatchWaiter, sleeping
from conveyor.storage.postgres import batches, graph, groups
from conveyor.storage.postgres.cancel import cancel
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Database
from conveyor.storage.postgres.notices import Notices
from conveyor.storage.postgres.text import enc
from conveyor.storage.retention import Retention
from conveyor.storage.rules import LEASE_EXPIRED, WORKER_DIED, cancelled_message
from conveyor.storage.totals import history_start

# Retention deletes, each bounded by its last parameter (rows per statement). Rows another
# transaction holds are skipped, not waited for: the next call takes them. The state is
# written into the statement, not passed as a parameter, so that even a generic plan proves
# the partial index jobs_done (finished states only) applies and walks it oldest first.
_TRIM_STATE = (
    "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = '{state}' "
    "AND finished_at < %s ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED)")
# The dead jobs beyond the newest dead_max. No SKIP LOCKED here: a skipped row would not be
# counted by OFFSET and one of the newest would be deleted in its place; the outer test of
# the state keeps a job retried meanwhile.
_TRIM_DEAD_MAX = (
    "DELETE FROM jobs WHERE state = 'dead' AND id IN (SELECT id FROM jobs WHERE state = 'dead' "
    "AND finished_at IS NOT NULL ORDER BY finished_at DESC OFFSET %s LIMIT %s)")
_TRIM_BATCHES = (
    "DELETE FROM batches WHERE id IN (SELECT id FROM batches WHERE finished_at < %s "
    f"AND {batches.TERMINAL_SUM} >= total LIMIT %s FOR UPDATE SKIP LOCKED)")
_TRIM_UNIQUE = (
    "DELETE FROM unique_locks WHERE key IN (SELECT key FROM unique_locks u WHERE until < %s "
    "AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = u.job_id AND state NOT IN "
    "('succeeded', 'failed', 'dead', 'cancelled')) LIMIT %s FOR UPDATE OF u SKIP LOCKED)")
_TRIM_RATE_HITS = (  # no key of its own: rows are addressed by their physical place
    "DELETE FROM rate_hits WHERE ctid = ANY(ARRAY(SELECT ctid FROM rate_hits WHERE ts < %s "
    "LIMIT %s))")
# Closed breakers whose logged errors all left their window: the same as no row (an ack of
# the key forgets its own; this drops those of keys no job acks any more).
_TRIM_BREAKERS = (
    "DELETE FROM breakers WHERE key IN (SELECT key FROM breakers WHERE state = 'closed' "
    "AND coalesce((SELECT max(t) FROM unnest(failures) AS t), 0) <= %s::float8 - within "
    "LIMIT %s FOR UPDATE SKIP LOCKED)")

# Node rows of workflow jobs deleted after they settled.
_TRIM_NODES = (
    "DELETE FROM wf_nodes WHERE id = ANY(ARRAY(SELECT id FROM wf_nodes WHERE settled IS NOT "
    "NULL AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = wf_nodes.id) LIMIT %s))")

# Promotion, and in the same round trip whether members are due or groups due to flush (the
# Python steps of postgres/groups.py then run in a second transaction).
_PROMOTE = (
    "SELECT promote(%s::float8, %s::int4), EXISTS (SELECT 1 FROM jobs WHERE state IN "
    "('scheduled', 'retrying') AND group_key IS NOT NULL AND run_at <= clock_now(%s::float8)),"
    " EXISTS (SELECT 1 FROM agg_groups WHERE flush_at <= clock_now(%s::float8))")

TRIM_CHUNK = 1000  # rows per DELETE statement (one short transaction)
TRIM_ROUNDS = 20  # DELETE statements per kind of row and trim() call


class PostgresUpkeep:
    """Promotion, recovery, cancel, batches and trimming over one schema."""

    trim_chunk = TRIM_CHUNK
    trim_rounds = TRIM_ROUNDS

    def __init__(self, db: Database, clock: ServerClock, notices: Notices) -> None:
        self._db = db
        self._clock = clock
        self._notices = notices

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time has come → pending (server-side
        ``promote``: one round trip)."""
        with self._db.call() as cur:
            row = cur.execute(_PROMOTE, (self._clock.arg(), limit, self._clock.arg(),
                                         self._clock.arg())).fetchone()
        moved = int(row[0]) if row else 0
        if row is not None and (row[1] or row[2]):  # members due, or groups: one more step
            with self._db.write() as cur:
                now = self._clock.at(cur)
                moved += groups.promote(cur, now, limit) + groups.flush(cur, now, limit)
        self.settle_marks()  # the sweep: marks a crash or a server-side move left behind
        return moved

    def settle_marks(self, marked: bool = False) -> int:
        """Settle the workflow nodes whose moves left a mark (``graph.py``); returns the
        nodes moved. One read when there are none (none when the caller knows there are:
        ``marked``, as an ack's round trip reports)."""
        if not marked and self._db.read().execute(
                "SELECT 1 FROM wf_marks LIMIT 1").fetchone() is None:
            return 0
        with self._db.write() as cur:
            return graph.settle(cur, self._clock.at(cur))

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Active jobs with an expired or missing lease → pending (or dead: a poison job)."""
        with self._db.call() as cur:
            row = cur.execute(
                "SELECT reclaim(%s::float8, %s::int4, %s::int4, %s::text, %s::text)",
                (self._clock.arg(), max_recoveries, limit, LEASE_EXPIRED,
                 cancelled_message(LEASE_EXPIRED))).fetchone()
        self.settle_marks()
        return int(row[0]) if row else 0

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        with self._db.call() as cur:
            row = cur.execute(
                "SELECT release_worker(%s::float8, %s::text, %s::int4, %s::text, %s::text)",
                (self._clock.arg(), enc(worker_id), max_recoveries, WORKER_DIED,
                 cancelled_message(WORKER_DIED))).fetchone()
        self.settle_marks()
        return int(row[0]) if row else 0

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one."""
        with self._db.write() as cur:
            return cancel(cur, self._clock.at(cur), job_id)

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch."""
        with self._db.write() as cur:
            batches.create(cur, self._clock.at(cur), spec)

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch fully enqueued; complete it now if every job is already terminal."""
        with self._db.write() as cur:
            batches.close(cur, self._clock.arg(), batch_id)

    def batch_finished(self, batch_id: str) -> AbstractContextManager[BatchWaiter]:
        """Wake-ups as the batch finishes (the process's shared LISTEN connection,
        ``notices.py``); with ``?listen=0`` (a pooler in transaction mode) none: the waiter
        sleeps."""
        if not self._db.settings.listen:
            return sleeping()
        return self._notices.watch(self._db.settings.batch_channel, batch_id)

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, batches and silent workers past retention; returns the jobs
        removed. Bounded: each DELETE takes at most ``trim_chunk`` rows and is its own short
        transaction, and each kind of row gets at most ``trim_rounds`` of them per call, so a
        backlog past retention is worked off over several calls (docs/postgres.md)."""
        with self._db.read().cursor() as cur:
            now = self._clock.at(cur)
        removed = 0
        for state, keep in (("succeeded", retention.succeeded_seconds),
                            ("failed", retention.failed_seconds),
                            ("dead", retention.dead_seconds),
                            ("cancelled", retention.failed_seconds)):
            removed += self._bounded(_TRIM_STATE.format(state=state), (now - keep,))
        removed += self._bounded(_TRIM_DEAD_MAX, (retention.dead_max,))
        self._bounded(_TRIM_BATCHES, (now - retention.batch_seconds,))
        self._bounded(_TRIM_UNIQUE, (now,))
        # Hits of keys still in use are pruned at dequeue; this drops abandoned keys.
        self._bounded(_TRIM_RATE_HITS, (now - retention.succeeded_seconds,))
        self._bounded(_TRIM_BREAKERS, (now,))
        with self._db.call() as cur:  # one row per worker process (or waiting caller): small
            cur.execute("DELETE FROM workers WHERE last_seen < %s", (now - retention.worker_ttl,))
            # a caller that died waiting (its row is deleted when it stops waiting)
            cur.execute("DELETE FROM result_waiters WHERE since < %s", (now - 86400,))
            # at most a day of minutes per queue: a small table, one short statement
            cur.execute("DELETE FROM minute_totals WHERE minute < %s", (history_start(now),))
        self._bounded(_TRIM_NODES, ())
        return removed

    def _bounded(self, statement: str, args: tuple[object, ...]) -> int:
        """Run a DELETE of at most ``trim_chunk`` rows (its last parameter) until it deletes
        fewer, at most ``trim_rounds`` times; each run is one statement in autocommit."""
        removed = 0
        for _ in range(self.trim_rounds):
            with self._db.call() as cur:
                deleted = cur.execute(statement, (*args, self.trim_chunk)).rowcount
            removed += max(deleted, 0)
            if deleted < self.trim_chunk:
                break
        return removed
