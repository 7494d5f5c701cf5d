"""The embedded SQLite backend: ``open_sqlite("sqlite:///conveyor.db")``.

Every transition is one ``BEGIN IMMEDIATE`` transaction that updates the job rows, appends
their events and moves their batch counters. Dequeue is one ``UPDATE … RETURNING`` per queue
that sets the lease; acknowledgements of a whole list are one fenced ``UPDATE … FROM``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from conveyor.core.clock import SYSTEM_CLOCK, Clock
from conveyor.core.job import (
    Ack,
    BatchSpec,
    EnqueueResult,
    Event,
    EventKind,
    HeartbeatReply,
    JobSpec,
    JobState,
    LeasedJob,
)
from conveyor.errors import StorageMissing, WorkflowError
from conveyor.storage.aio import ThreadedAsync
from conveyor.storage.base import RefusesTransactions, WaitsThenDequeues
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.graph import check_added
from conveyor.storage.records import JobBlock, Retention, WorkerInfo, history_start
from conveyor.storage.rules import DEADLINE_PASSED, LEASE_EXPIRED, WORKER_DIED
from conveyor.storage.sqlite import acks as ack_sql
from conveyor.storage.sqlite import batches, flow, graph, groups, jobs, lineup
from conveyor.storage.sqlite import leases as lease_sql
from conveyor.storage.sqlite.connection import (
    Database,
    check_path,
    check_sqlite_version,
    parse_file_mode,
    parse_sqlite_url,
    reads,
)
from conveyor.storage.sqlite.gates import SqliteGates
from conveyor.storage.sqlite.inspect import SqliteInspector
from conveyor.storage.sqlite.migrate import migrate
from conveyor.storage.sqlite.outbox import SqliteOutbox
from conveyor.storage.sqlite.schedules import SqliteSchedules
from conveyor.storage.sqlite.wakeup import data_version

ENQUEUE_CHUNK = 5000

_EXPIRE = (
    "SELECT id, state, batch_id FROM jobs WHERE state = 'pending' AND queue = ? "
    "AND deadline IS NOT NULL AND deadline < ?"
)
# Hinted: the planner otherwise sorts every scheduled job by run_at.
_PROMOTE = (
    "SELECT id, state, batch_id FROM jobs INDEXED BY jobs_due "
    "WHERE state IN ('scheduled', 'retrying') AND run_at <= ? ORDER BY run_at LIMIT ?"
)
# Hinted: the planner otherwise walks every finished job of the state.
_TRIM = "DELETE FROM jobs INDEXED BY jobs_finished WHERE finished_at < ? AND state = ?"
_GATED = (
    # Hinted: the planner prefers (state, queue) and scans every pending job.
    "SELECT 1 FROM jobs INDEXED BY jobs_ready_gated "
    "WHERE state = 'pending' AND gated = 1 AND queue = ? LIMIT 1"
)
_EXPIRED_MESSAGE = DEADLINE_PASSED


def open_sqlite(url: str, clock: Clock | None = None, *, create: bool = True,
                applied: list[str] | None = None) -> SqliteStorage:
    """Open (creating and migrating if needed) the database a ``sqlite://`` URL names;
    ``create=False``: only a file that exists (``StorageMissing`` otherwise). ``applied``
    receives the names of the migrations this open applied."""
    path = parse_sqlite_url(url)
    check_sqlite_version()
    check_path(path)
    if not create and not path.exists():
        raise StorageMissing(f"no SQLite database at {path.absolute()} (nothing was created)")
    db = Database(path, parse_file_mode(url))
    migrate(db.conn(), applied)
    return SqliteStorage(url, db, clock or SYSTEM_CLOCK)


class SqliteStorage(RefusesTransactions, WaitsThenDequeues, SqliteOutbox, SqliteGates,
                    SqliteInspector, SqliteSchedules, ThreadedAsync):
    """``Storage`` and ``Inspector`` over one SQLite file, safe across threads and processes."""

    def __init__(self, url: str, db: Database, clock: Clock) -> None:
        super().__init__(db, clock)
        self.url = url
        # (data_version, wake-ups) as this thread's last empty dequeue began
        self._seen = threading.local()

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs, one transaction per chunk of ``ENQUEUE_CHUNK``."""
        results: list[EnqueueResult] = []
        for start in range(0, len(specs), ENQUEUE_CHUNK):
            chunk = specs[start:start + ENQUEUE_CHUNK]
            with self._db.write() as cur:
                results.extend(jobs.insert(cur, self.now(), chunk))
            self._wakeup.notify()
        return results

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store a block of jobs, one transaction per chunk of ``ENQUEUE_CHUNK``."""
        results: list[EnqueueResult] = []
        for start in range(0, len(block), ENQUEUE_CHUNK):
            end = start + ENQUEUE_CHUNK
            chunk = replace(block, ids=block.ids[start:end], payloads=block.payloads[start:end],
                            flows=None if block.flows is None else block.flows[start:end])
            with self._db.write() as cur:
                results.extend(jobs.insert_block(cur, self.now(), chunk))
            self._wakeup.notify()
        return results

    @reads
    def dequeue(
        self, queues: Sequence[str], worker_id: str, count: int, lease_seconds: float,
        capacity: int = 0,
    ) -> list[LeasedJob]:
        """Lease pending jobs up to ``count`` slots, queue by queue in the order given."""
        if count <= 0 or not queues:
            return []
        leased: list[LeasedJob] = []
        # What the next wait compares with, read before the transaction: a commit landing
        # after this point is leased now or wakes that wait (read after, it was missed).
        before = (data_version(self._db.read()), self._wakeup.generation)
        with self._db.write() as cur:
            now = self.now()
            paused = {r[0] for r in cur.execute("SELECT name FROM queues WHERE paused = 1")}
            moves: list[batches.Move] = []
            params: dict[str, Any] = {"worker": worker_id, "now": now,
                                      "expires": now + lease_seconds}
            room = count
            for queue in dict.fromkeys(queues):
                if room <= 0:
                    break
                if queue in paused:
                    continue
                expired = cur.execute(_EXPIRE, (queue, now)).fetchall()
                moves += jobs.move(cur, now, expired, JobState.DEAD, EventKind.EXPIRED,
                                   _EXPIRED_MESSAGE, f"message = :msg, {jobs.FINISH}")
                for row in self._lease(cur, now, queue, room, capacity, params, moves):
                    job = lease_sql.leased(row)
                    leased.append(job)
                    room -= job.cost
                    if job.batch_id:
                        moves.append((job.batch_id, "pending", "active"))
            batches.apply(cur, now, moves, jobs.insert)
        if room > 0:  # the queues ran dry: the next call is a wait
            self._seen.version = before
        return leased

    def _lease(
        self, cur: Any, now: float, queue: str, need: int, capacity: int,
        params: dict[str, Any], moves: list[batches.Move],
    ) -> list[Any]:
        gated = cur.execute(_GATED, (queue,)).fetchone()
        if gated and cur.execute(lineup.LINED, (queue,)).fetchone():
            return lineup.lease(cur, now, queue, need, capacity, params, moves)
        if gated:
            ids, gates = flow.pick(cur, now, queue, need)
            moves += flow.end_broken(cur, now, gates)
            if not ids:
                return []
            rows = cur.execute(lease_sql.LEASE_IDS,
                               {**params, "ids": jobs.ids_param(ids)}).fetchall()
        else:
            rows = cur.execute(lease_sql.LEASE_FIRST,
                               {**params, "queue": queue, "count": need}).fetchall()
        rows.sort(key=lambda r: (r[11], r[12]))
        return list(rows)

    @reads
    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until work may be ready on ``queues`` (see ``wakeup.py``)."""
        names = jobs.ids_param(queues)

        def has_work() -> bool:
            row = self._db.read().execute(
                "SELECT 1 FROM jobs WHERE state = 'pending' AND queue IN "
                "(SELECT value FROM json_each(?) WHERE value NOT IN "
                "(SELECT name FROM queues WHERE paused = 1)) LIMIT 1",
                (names,),
            ).fetchone()
            return row is not None

        seen: tuple[int, int] | None = getattr(self._seen, "version", None)
        self._seen.version = None

        def last_seen(version: tuple[int, int]) -> None:  # a timed-out wait hands it on
            self._seen.version = version

        return self._wakeup.wait(self._db.read, has_work, timeout, seen, last_seen)

    def ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Apply outcomes, fenced by lease token, all in one transaction."""
        if not acks:
            return []
        with self._db.write() as cur:
            now = self.now()
            applied, moves = ack_sql.apply(cur, now, acks)
            settled = batches.apply(cur, now, moves, jobs.insert)
        # Work made pending by this process is announced at once (a handed-back job, a
        # workflow's released node); other processes see the commit by polling.
        if settled or any(a.outcome.value == "interrupted" for a in acks):
            self._wakeup.notify()
        return applied

    def log(self, job_id: str, token: str, events: Sequence[Event],
            progress: tuple[int, int] | None = None) -> bool:
        """Append a running job's messages and progress, fenced by its lease token."""
        text = "".join(e.to_json() + "\n" for e in events)
        with self._db.write() as cur:
            updated = cur.execute(
                "UPDATE jobs SET events = events || ?, progress = coalesce(?, progress) "
                "WHERE id = ? AND token = ? AND state = 'active'",
                (text, json.dumps(list(progress)) if progress else None, job_id, token),
            ).rowcount
        return bool(updated)

    def add_nodes(self, adder: str, token: str,
                  specs: Sequence[JobSpec]) -> list[EnqueueResult] | None:
        """Store nodes a running job adds to its workflow, fenced by its lease token, and
        link them in the same transaction; see ``Storage.add_nodes``."""
        with self._db.write() as cur:
            row = cur.execute(
                "SELECT jobs.batch_id, wf_nodes.id FROM jobs LEFT JOIN wf_nodes "
                "ON wf_nodes.id = jobs.id WHERE jobs.id = ? AND token = ? AND state = 'active'",
                (adder, token)).fetchone()
            if row is None:
                return None
            if row[0] is None or row[1] is None:
                raise WorkflowError(f"job {adder} is not a node of a workflow")
            parents = {p for s in specs if s.node for p in s.node.parents}
            check_added(row[0], specs, graph.known(cur, row[0], parents),
                        graph.taken(cur, row[0], [s.id for s in specs]))
            now = self.now()
            results = jobs.insert(cur, now, specs)
            batches.attach(cur, now, [r.id for r in results if r.created], jobs.insert)
        self._wakeup.notify()
        return results

    def heartbeat(
        self, info: WorkerInfo, leases: Mapping[str, str], lease_seconds: float
    ) -> HeartbeatReply:
        """Register the worker, extend its leases, report lost/cancelled jobs and a command."""
        with self._db.write() as cur:
            now = self.now()
            wire = {**info.to_wire(), "last_seen": now}
            command = cur.execute(
                "INSERT INTO workers (id, info, last_seen) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET info = excluded.info, "
                "last_seen = excluded.last_seen RETURNING command",
                (info.id, json.dumps(wire), now),
            ).fetchone()[0]
            if command is not None:
                cur.execute("UPDATE workers SET command = NULL WHERE id = ?", (info.id,))
            rows = cur.execute(
                "SELECT id, rowid, token, cancel_requested FROM jobs "
                "WHERE id IN (SELECT value FROM json_each(?)) AND state = 'active'",
                (jobs.ids_param(leases),),
            ).fetchall() if leases else []
            held = [r for r in rows if leases.get(r[0]) == r[2]]
            cur.executemany(  # by rowid: see acks.py
                "UPDATE jobs SET lease_expires_at = ? WHERE rowid = ?",
                [(now + lease_seconds, r[1]) for r in held],
            )
        return HeartbeatReply(
            lost=frozenset(set(leases) - {r[0] for r in held}),
            cancel=frozenset(r[0] for r in held if r[3]),
            command=command,
        )

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry."""
        with self._db.write() as cur:
            cur.execute("DELETE FROM workers WHERE id = ?", (worker_id,))

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time has come → pending."""
        with self._db.write() as cur:
            now = self.now()
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

    @reads
    def gather(self, lead: str, token: str) -> list[LeasedJob] | None:
        """Lease the members of ``lead``'s group for its run; see ``Storage.gather``."""
        with self._db.write() as cur:
            return groups.gather(cur, self.now(), lead, token)

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Active jobs with an expired or missing lease → pending (or dead: a poison job)."""
        with self._db.write() as cur:
            now = self.now()
            rows = lease_sql.decoded_rows(cur, lease_sql.RECLAIM, {"now": now, "limit": limit})
            back = lease_sql.recover(cur, now, rows, max_recoveries, LEASE_EXPIRED)
        if back:
            self._wakeup.notify()
        return len(rows)

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        with self._db.write() as cur:
            now = self.now()
            rows = lease_sql.decoded_rows(cur, lease_sql.HELD, (worker_id,))
            back = lease_sql.recover(cur, now, rows, max_recoveries, WORKER_DIED)
            cur.execute("DELETE FROM workers WHERE id = ?", (worker_id,))
        if back:
            self._wakeup.notify()
        return len(rows)

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one."""
        with self._db.write() as cur:
            now = self.now()
            return self._cancel(cur, now, job_id)

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch."""
        with self._db.write() as cur:
            batches.create(cur, self.now(), spec)

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch fully enqueued; complete it now if every job is already terminal."""
        with self._db.write() as cur:
            batches.close(cur, self.now(), batch_id, jobs.insert)
        self._wakeup.notify()

    def batch_finished(self, batch_id: str) -> AbstractContextManager[BatchWaiter]:
        """Wake-ups when the batch may have finished (``batches.finished_waiter``)."""
        return batches.finished_waiter(self._db.read, self._wakeup, batch_id)

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, batches and silent workers past retention."""
        removed = 0
        with self._db.write() as cur:
            now = self.now()
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

    def tidy(self) -> bool:
        """Nothing to do: no old row versions pile up here (``Storage.tidy``)."""
        return False

    def check_server(self) -> list[str]:
        """Nothing to warn about: the file's settings are conveyor's own (WAL, busy timeout)."""
        return []

    def close(self) -> None:
        """Release this process's connections. Idempotent."""
        self._db.close()


