"""The embedded SQLite backend: ``open_sqlite("sqlite:///conveyor.db")``.

Every transition is one ``BEGIN IMMEDIATE`` transaction that updates the job rows, appends
their events and moves their batch counters. Dequeue is one ``UPDATE … RETURNING`` per queue
that sets the lease; acknowledgements of a whole list are one fenced ``UPDATE … FROM``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from conveyor.core.clock import SYSTEM_CLOCK, Clock
from conveyor.core.job import (
    Ack,
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
from conveyor.storage.base import Leases, Storage, WaitsThenDequeues, transactions_refused
from conveyor.storage.blocks import JobBlock
from conveyor.storage.delegate import delegate
from conveyor.storage.graph import check_added
from conveyor.storage.rules import DEADLINE_PASSED
from conveyor.storage.schedule_edits import ScheduleEdits
from conveyor.storage.sqlite import acks as ack_sql
from conveyor.storage.sqlite import batches, flow, graph, groups, jobs, lineup
from conveyor.storage.sqlite import leases as lease_sql
from conveyor.storage.sqlite.breakers import SqliteBreakers
from conveyor.storage.sqlite.connection import (
    Database,
    check_path,
    check_sqlite_version,
    parse_file_mode,
    parse_sqlite_url,
    reads,
)
from conveyor.storage.sqlite.durable import SqliteDurable
from conveyor.storage.sqlite.flow import SqliteFlow
from conveyor.storage.sqlite.gates import SqliteGates
from conveyor.storage.sqlite.inspect import SqliteInspector
from conveyor.storage.sqlite.migrate import migrate
from conveyor.storage.sqlite.outbox import SqliteOutbox
from conveyor.storage.sqlite.schedules import SqliteSchedules
from conveyor.storage.sqlite.upkeep import SqliteUpkeep
from conveyor.storage.sqlite.wakeup import Wakeup, data_version
from conveyor.storage.workers import WorkerInfo

ENQUEUE_CHUNK = 5000

_EXPIRE = (
    "SELECT id, state, batch_id FROM jobs WHERE state = 'pending' AND queue = ? "
    "AND deadline IS NOT NULL AND deadline < ?"
)
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


class SqliteStorage:
    """``Storage`` and ``Inspector`` over one SQLite file, safe across threads and processes:
    the hot path here, the rest in parts made over the same ``Database``, clock and wake-ups
    (``storage/delegate.py``)."""

    wait_dequeue = delegate("_waits", WaitsThenDequeues.wait_dequeue)
    # the Inspector
    queues = delegate("_inspector", SqliteInspector.queues)
    get_job = delegate("_inspector", SqliteInspector.get_job)
    list_jobs = delegate("_inspector", SqliteInspector.list_jobs)
    count_jobs = delegate("_inspector", SqliteInspector.count_jobs)
    job_heads = delegate("_inspector", SqliteInspector.job_heads)
    retry_jobs = delegate("_inspector", SqliteInspector.retry_jobs)
    retry_refusals = delegate("_inspector", SqliteInspector.retry_refusals)
    delete_jobs = delegate("_inspector", SqliteInspector.delete_jobs)
    kill_jobs = delegate("_inspector", SqliteInspector.kill_jobs)
    reseal = delegate("_inspector", SqliteInspector.reseal)
    retry_all = delegate("_inspector", SqliteInspector.retry_all)
    clear = delegate("_inspector", SqliteInspector.clear)
    workers = delegate("_inspector", SqliteInspector.workers)
    command_worker = delegate("_inspector", SqliteInspector.command_worker)
    get_batch = delegate("_inspector", SqliteInspector.get_batch)
    list_batches = delegate("_inspector", SqliteInspector.list_batches)
    cancel_batch = delegate("_inspector", SqliteInspector.cancel_batch)
    workflow_graph = delegate("_inspector", SqliteInspector.workflow_graph)
    history = delegate("_inspector", SqliteInspector.history)
    job_totals = delegate("_inspector", SqliteInspector.job_totals)
    gate_facts = delegate("_gates", SqliteGates.gate_facts)
    breakers = delegate("_breakers", SqliteBreakers.breakers)
    close_breaker = delegate("_breakers", SqliteBreakers.close_breaker)
    pause_queue = delegate("_flow", SqliteFlow.pause_queue)
    resume_queue = delegate("_flow", SqliteFlow.resume_queue)
    # upkeep: promotion, recovery, cancel, batches, retention
    promote_due = delegate("_upkeep", SqliteUpkeep.promote_due)
    reclaim_expired = delegate("_upkeep", SqliteUpkeep.reclaim_expired)
    release_worker = delegate("_upkeep", SqliteUpkeep.release_worker)
    cancel = delegate("_upkeep", SqliteUpkeep.cancel)
    create_batch = delegate("_upkeep", SqliteUpkeep.create_batch)
    close_batch = delegate("_upkeep", SqliteUpkeep.close_batch)
    batch_finished = delegate("_upkeep", SqliteUpkeep.batch_finished)
    trim = delegate("_upkeep", SqliteUpkeep.trim)
    # schedules (Storage and Inspector)
    schedule_ticked = delegate("_schedules", SqliteSchedules.schedule_ticked)
    schedules = delegate("_schedules", SqliteSchedules.schedules)
    schedule_changes = delegate("_schedules", SqliteSchedules.schedule_changes)
    save_schedules = delegate("_edits", ScheduleEdits.save_schedules)
    schedule_pauses = delegate("_edits", ScheduleEdits.schedule_pauses)
    pause_schedule = delegate("_edits", ScheduleEdits.pause_schedule)
    resume_schedule = delegate("_edits", ScheduleEdits.resume_schedule)
    add_schedule = delegate("_edits", ScheduleEdits.add_schedule)
    change_schedule = delegate("_edits", ScheduleEdits.change_schedule)
    reset_schedule = delegate("_edits", ScheduleEdits.reset_schedule)
    remove_schedule = delegate("_edits", ScheduleEdits.remove_schedule)
    # the Outbox
    publish_due = delegate("_outbox", SqliteOutbox.publish_due)
    publish_failed = delegate("_outbox", SqliteOutbox.publish_failed)
    start = delegate("_outbox", SqliteOutbox.start)
    order_keys = delegate("_outbox", SqliteOutbox.order_keys)
    bury = delegate("_outbox", SqliteOutbox.bury)
    # asyncio: the blocking calls in a thread
    aenqueue = delegate("_async", ThreadedAsync.aenqueue)
    aget_job = delegate("_async", ThreadedAsync.aget_job)
    afinished = delegate("_async", ThreadedAsync.afinished)
    aclose = delegate("_async", ThreadedAsync.aclose)

    def __init__(self, url: str, db: Database, clock: Clock) -> None:
        self.url = url
        self._db = db
        self._clock = clock
        self._wakeup = Wakeup()
        # (data_version, wake-ups) as this thread's last empty dequeue began
        self._seen = threading.local()
        self._inspector = SqliteInspector(db, clock, self._wakeup)
        self._gates = SqliteGates(db, clock, self._inspector)
        self._flow = SqliteFlow(db, self._wakeup)
        self._breakers = SqliteBreakers(db, clock)
        self._upkeep = SqliteUpkeep(db, clock, self._wakeup)
        self.durable = SqliteDurable(db, clock, self._wakeup)
        self._schedules = SqliteSchedules(db)
        self._edits = ScheduleEdits(self.now, self._schedules)
        self._outbox = SqliteOutbox(db, clock)
        self._waits = WaitsThenDequeues(self.wait, self.dequeue, self.ack)
        self._async = ThreadedAsync(self.enqueue, self._inspector.get_job)

    def now(self) -> float:
        """The storage's clock (the SQLite host's)."""
        return self._clock.now()

    def bind(self, connection: object) -> Storage:
        """Refuse: this storage cannot write inside someone else's transaction."""
        raise transactions_refused(self.url, connection)

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
        capacity: int = 0, acks: Sequence[Ack] = (),
    ) -> Leases:
        """Apply ``acks``, then lease pending jobs up to ``count`` slots, queue by queue in
        the order given, all in one transaction."""
        if count <= 0 or not queues:
            return Leases((), self.ack(acks))
        leased = Leases()
        # What the next wait compares with, read before the transaction: a commit landing
        # after this point is leased now or wakes that wait (read after, it was missed).
        before = (data_version(self._db.read()), self._wakeup.generation)
        with self._db.write() as cur:
            now = self.now()
            leased.acked, settled = self._apply_acks(cur, now, acks)
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
        if settled:
            self._wakeup.notify()
        if leased:
            self._wakeup.worked()  # the wait that may follow polls briskly (wakeup.py)
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
            applied, settled = self._apply_acks(cur, self.now(), acks)
        if settled:
            self._wakeup.notify()
        return applied

    @staticmethod
    def _apply_acks(cur: Any, now: float, acks: Sequence[Ack]) -> tuple[list[bool], bool]:
        """Apply ``acks`` in the caller's transaction; returns their results and whether
        the commit must be announced: work made pending by this process (a handed-back job,
        a workflow's released node) is announced at once, other processes poll."""
        if not acks:
            return [], False
        applied, moves = ack_sql.apply(cur, now, acks)
        settled = batches.apply(cur, now, moves, jobs.insert)
        return applied, bool(settled) or any(a.outcome.value == "interrupted" for a in acks)

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

    @reads
    def gather(self, lead: str, token: str) -> list[LeasedJob] | None:
        """Lease the members of ``lead``'s group for its run; see ``Storage.gather``."""
        with self._db.write() as cur:
            return groups.gather(cur, self.now(), lead, token)

    def tidy(self) -> bool:
        """Nothing to do: no old row versions pile up here (``Storage.tidy``)."""
        return False

    def check_server(self) -> list[str]:
        """Nothing to warn about: the file's settings are conveyor's own (WAL, busy timeout)."""
        return []

    def close(self) -> None:
        """Release this process's connections. Idempotent."""
        self._db.close()


