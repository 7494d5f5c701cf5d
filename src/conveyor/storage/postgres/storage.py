"""The PostgreSQL backend: ``open_postgres("postgresql://user:pass@host/db?schema=conveyor")``.

Every transition is one transaction that updates the job rows, appends their events and moves
their batch counters. The hot path (enqueue, dequeue, ack, heartbeat) is one call of a
server-side function each (functions/<name>.sql): one round trip, no transaction
block, no client code between its statements. Dequeue leases many jobs over rows picked ``FOR
UPDATE SKIP LOCKED`` (many workers never wait on each other); acknowledgements of a whole
list are one fenced ``UPDATE``. Times come from the server's ``clock_timestamp()``, read
inside each function, unless a test clock was given at open (its time is passed along).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from conveyor.core.clock import Clock, SystemClock
from conveyor.core.job import (
    Ack,
    EnqueueResult,
    Event,
    HeartbeatReply,
    JobSpec,
    LeasedJob,
)
from conveyor.errors import StorageReadOnly
from conveyor.storage.aio import ThreadedAsync
from conveyor.storage.base import Leases, WaitsThenDequeues
from conveyor.storage.blocks import JobBlock
from conveyor.storage.delegate import delegate
from conveyor.storage.graph import check_added
from conveyor.storage.postgres import acks as ack_sql
from conveyor.storage.postgres import arrays, fold, graph, groups, jobs
from conveyor.storage.postgres.aio import PostgresAsync
from conveyor.storage.postgres.bound import Binder
from conveyor.storage.postgres.breakers import PostgresBreakers
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import (
    Connections,
    Database,
    Settings,
    parse_postgres_url,
    reads,
)
from conveyor.storage.postgres.durable import PostgresDurable
from conveyor.storage.postgres.flow import PostgresFlow
from conveyor.storage.postgres.gates import PostgresGates
from conveyor.storage.postgres.inspect import PostgresInspector
from conveyor.storage.postgres.migrate import migrate
from conveyor.storage.postgres.notices import Notices
from conveyor.storage.postgres.outbox import PostgresOutbox
from conveyor.storage.postgres.schedules import PostgresSchedules
from conveyor.storage.postgres.text import enc
from conveyor.storage.postgres.upkeep import PostgresUpkeep
from conveyor.storage.postgres.vacuum import PostgresVacuum
from conveyor.storage.postgres.wakeup import Listener
from conveyor.storage.schedule_edits import ScheduleEdits
from conveyor.storage.workers import WorkerInfo

ENQUEUE_CHUNK = 5000

_DEQUEUE = ("SELECT * FROM dequeue(%s::float8, %s::text[], %s::text, %s::int4, %s::float8, "
            "%s::int4)")
_HEARTBEAT = ("SELECT * FROM heartbeat(%s::float8, %s::text, %s::text, %s::text[], %s::text[], "
              "%s::float8)")
_HAS_WORK = (
    "SELECT 1 FROM jobs WHERE state = 'pending' AND queue = ANY(%s) AND queue NOT IN "
    "(SELECT name FROM queues WHERE paused) LIMIT 1"
)
_SERVER_CHECK = (
    "SELECT current_setting('fsync'), current_setting('full_page_writes'), "
    "current_setting('transaction_read_only'), "
    "has_table_privilege('jobs', 'INSERT') AND has_table_privilege('jobs', 'UPDATE')"
)


def open_postgres(url: str, clock: Clock | None = None, *, create: bool = True,
                  applied: list[str] | None = None) -> PostgresStorage:
    """Open (creating the schema and migrating it if needed) the schema a URL names;
    ``create=False``: only a schema conveyor created before (``StorageMissing`` otherwise).
    ``applied`` receives the names of the migrations this open applied.

    Leases and schedules use the server's ``clock_timestamp()``. Only a clock other than the
    system clock (a test's ``FakeClock``) replaces it: a worker's own wall clock never decides.
    """
    settings = parse_postgres_url(url)
    db = Connections(settings)
    with db.outages():
        migrate(db.conn(), settings, create=create, applied=applied)
    return PostgresStorage(settings, db, None if isinstance(clock, SystemClock) else clock)


class PostgresStorage:
    """``Storage`` and ``Inspector`` over one PostgreSQL schema, safe across threads and
    processes: the hot path here, the rest in parts made over the same ``Database`` and
    clock (``storage/delegate.py``)."""

    now = delegate("_clock", ServerClock.now)
    wait_dequeue = delegate("_waits", WaitsThenDequeues.wait_dequeue)
    # the Inspector
    queues = delegate("_inspector", PostgresInspector.queues)
    get_job = delegate("_inspector", PostgresInspector.get_job)
    list_jobs = delegate("_inspector", PostgresInspector.list_jobs)
    count_jobs = delegate("_inspector", PostgresInspector.count_jobs)
    job_heads = delegate("_inspector", PostgresInspector.job_heads)
    retry_jobs = delegate("_inspector", PostgresInspector.retry_jobs)
    retry_refusals = delegate("_inspector", PostgresInspector.retry_refusals)
    delete_jobs = delegate("_inspector", PostgresInspector.delete_jobs)
    kill_jobs = delegate("_inspector", PostgresInspector.kill_jobs)
    reseal = delegate("_inspector", PostgresInspector.reseal)
    retry_all = delegate("_inspector", PostgresInspector.retry_all)
    clear = delegate("_inspector", PostgresInspector.clear)
    workers = delegate("_inspector", PostgresInspector.workers)
    command_worker = delegate("_inspector", PostgresInspector.command_worker)
    get_batch = delegate("_inspector", PostgresInspector.get_batch)
    list_batches = delegate("_inspector", PostgresInspector.list_batches)
    cancel_batch = delegate("_inspector", PostgresInspector.cancel_batch)
    workflow_graph = delegate("_inspector", PostgresInspector.workflow_graph)
    history = delegate("_inspector", PostgresInspector.history)
    job_totals = delegate("_inspector", PostgresInspector.job_totals)
    gate_facts = delegate("_gates", PostgresGates.gate_facts)
    breakers = delegate("_breakers", PostgresBreakers.breakers)
    close_breaker = delegate("_breakers", PostgresBreakers.close_breaker)
    pause_queue = delegate("_flow", PostgresFlow.pause_queue)
    resume_queue = delegate("_flow", PostgresFlow.resume_queue)
    # upkeep: promotion, recovery, cancel, batches, retention; vacuum
    promote_due = delegate("_upkeep", PostgresUpkeep.promote_due)
    reclaim_expired = delegate("_upkeep", PostgresUpkeep.reclaim_expired)
    release_worker = delegate("_upkeep", PostgresUpkeep.release_worker)
    cancel = delegate("_upkeep", PostgresUpkeep.cancel)
    create_batch = delegate("_upkeep", PostgresUpkeep.create_batch)
    close_batch = delegate("_upkeep", PostgresUpkeep.close_batch)
    batch_finished = delegate("_upkeep", PostgresUpkeep.batch_finished)
    trim = delegate("_upkeep", PostgresUpkeep.trim)
    tidy = delegate("_vacuum", PostgresVacuum.tidy)
    # schedules (Storage and Inspector)
    schedule_ticked = delegate("_schedules", PostgresSchedules.schedule_ticked)
    schedules = delegate("_schedules", PostgresSchedules.schedules)
    schedule_changes = delegate("_schedules", PostgresSchedules.schedule_changes)
    save_schedules = delegate("_edits", ScheduleEdits.save_schedules)
    schedule_pauses = delegate("_edits", ScheduleEdits.schedule_pauses)
    pause_schedule = delegate("_edits", ScheduleEdits.pause_schedule)
    resume_schedule = delegate("_edits", ScheduleEdits.resume_schedule)
    add_schedule = delegate("_edits", ScheduleEdits.add_schedule)
    change_schedule = delegate("_edits", ScheduleEdits.change_schedule)
    reset_schedule = delegate("_edits", ScheduleEdits.reset_schedule)
    remove_schedule = delegate("_edits", ScheduleEdits.remove_schedule)
    # the Outbox
    publish_due = delegate("_outbox", PostgresOutbox.publish_due)
    publish_failed = delegate("_outbox", PostgresOutbox.publish_failed)
    start = delegate("_outbox", PostgresOutbox.start)
    order_keys = delegate("_outbox", PostgresOutbox.order_keys)
    bury = delegate("_outbox", PostgresOutbox.bury)
    # asyncio: natively where it can, else the blocking calls in a thread
    aenqueue = delegate("_async", PostgresAsync.aenqueue)
    aget_job = delegate("_async", PostgresAsync.aget_job)
    afinished = delegate("_async", PostgresAsync.afinished)
    aclose = delegate("_async", PostgresAsync.aclose)

    def __init__(self, settings: Settings, db: Database, clock: Clock | None,
                 notices: Notices | None = None) -> None:
        self.url = settings.url
        self._db = db
        self._clock = ServerClock(db, clock)
        # Enqueues name the schema: on a bound storage (``bind``) they run on the
        # application's connection, whose search_path is its own.
        self._schema = settings.schema
        self._listener = Listener(settings, db.where)
        # waiting calls (Batch.wait, aresult) share one LISTEN connection per process
        self._notices = notices or Notices(settings, db.where)
        self._binder = Binder(db)
        self._inspector = PostgresInspector(db, self._clock)
        self._gates = PostgresGates(db, self._clock, self._inspector)
        self._flow = PostgresFlow(db)
        self._breakers = PostgresBreakers(db, self._clock)
        self._upkeep = PostgresUpkeep(db, self._clock, self._notices)
        self._vacuum = PostgresVacuum(db)
        self.durable = PostgresDurable(db, self._clock)
        self._schedules = PostgresSchedules(db)
        self._edits = ScheduleEdits(self.now, self._schedules)
        self._outbox = PostgresOutbox(db, self._clock)
        self._waits = WaitsThenDequeues(self.wait, self.dequeue, self.ack)
        self._async = PostgresAsync(db, self._clock, self._notices, self._schema,
                                    ThreadedAsync(self.enqueue, self._inspector.get_job))

    def __repr__(self) -> str:
        return f"<PostgresStorage {self._db.where}>"

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs, one transaction per chunk of ``ENQUEUE_CHUNK``."""
        results: list[EnqueueResult] = []
        for start in range(0, len(specs), ENQUEUE_CHUNK):
            chunk = specs[start:start + ENQUEUE_CHUNK]
            if any(s.flow is not None and s.flow.fold_key for s in chunk):  # debounce
                with self._db.write() as cur:
                    results.extend(fold.enqueue(cur, self._clock.arg(), chunk, self._schema))
                continue
            members = any(s.flow is not None and s.flow.group_key for s in chunk)
            if members or any(s.node for s in chunk):
                # a workflow's waiting nodes, aggregation members in their groups: in the
                # commit that stores them
                with self._db.write() as cur:
                    stored = jobs.insert(cur, self._clock.arg(), chunk, self._schema)
                    now = self._clock.at(cur)
                    graph.store(cur, now, chunk, stored)
                    if members:
                        groups.stored(cur, now, chunk, stored)
                results.extend(stored)
                continue
            with self._db.call() as cur:
                results.extend(jobs.insert(cur, self._clock.arg(), chunk, self._schema))
        return results

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store a block of jobs, one transaction per chunk of ``ENQUEUE_CHUNK``."""
        if block.flows is not None and any(f is not None and (f.fold_key or f.group_key)
                                           for f in block.flows):
            return self.enqueue(block.specs())  # debounced calls fold, members join, one by one
        results: list[EnqueueResult] = []
        for start in range(0, len(block), ENQUEUE_CHUNK):
            end = start + ENQUEUE_CHUNK
            chunk = replace(block, ids=block.ids[start:end], payloads=block.payloads[start:end],
                            flows=None if block.flows is None else block.flows[start:end])
            with self._db.call() as cur:
                results.extend(jobs.insert_block(cur, self._clock.arg(), chunk, self._schema))
        return results

    def dequeue(
        self, queues: Sequence[str], worker_id: str, count: int, lease_seconds: float,
        capacity: int = 0, acks: Sequence[Ack] = (),
    ) -> Leases:
        """Lease pending jobs up to ``count`` slots, queue by queue in the order given: one
        call of the server-side ``dequeue`` (pause, deadlines, flow control, the lineup,
        batch counters). ``acks`` go first, the server-side ``ack`` pipelined ahead of it:
        one round trip, one implicit transaction (no Sync between the two)."""
        if count <= 0 or not queues:
            return Leases((), self.ack(acks))
        now = self._clock.arg()
        args = (now, arrays.texts(dict.fromkeys(queues)), enc(worker_id), count, lease_seconds,
                capacity)
        if not acks:
            with self._db.call() as cur:
                return Leases(_leased(row) for row in cur.execute(_DEQUEUE, args).fetchall())
        with self._db.call() as cur, cur.connection.cursor() as lease, cur.connection.pipeline():
            acked = ack_sql.send(cur, now, acks)
            lease.execute(_DEQUEUE, args)
            applied, marked = acked()
            rows = lease.fetchall()
        if marked:  # as ``ack``: the settled node's children move in the next transaction
            self._upkeep.settle_marks(marked=True)
        return Leases((_leased(row) for row in rows), applied)

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until work may be ready on ``queues`` (see ``wakeup.py``)."""
        names = list(queues)

        @reads
        def has_work(self: PostgresStorage) -> bool:
            return self._db.read().execute(_HAS_WORK, (names,)).fetchone() is not None

        return self._listener.wait(names, lambda: has_work(self), timeout)

    def ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Apply outcomes, fenced by lease token: one call of the server-side ``ack``."""
        if not acks:
            return []
        with self._db.call() as cur:
            applied, marked = ack_sql.apply(cur, self._clock.arg(), acks)
        if marked:  # a workflow node settled: its children move in the next transaction
            self._upkeep.settle_marks(marked=True)
        return applied

    def log(self, job_id: str, token: str, events: Sequence[Event],
            progress: tuple[int, int] | None = None) -> bool:
        """Append a running job's messages and progress, fenced by its lease token."""
        text = "".join(e.to_json() + "\n" for e in events)
        with self._db.call() as cur:
            updated = cur.execute(
                "UPDATE jobs SET events = events || %s, progress = coalesce(%s, progress) "
                "WHERE id = %s AND token = %s AND state = 'active'",
                (text, json.dumps(list(progress)) if progress else None, job_id, token),
            ).rowcount
        return bool(updated)

    def add_nodes(self, adder: str, token: str,
                  specs: Sequence[JobSpec]) -> list[EnqueueResult] | None:
        """Store nodes a running job adds to its workflow, fenced by its lease token (its row
        locked meanwhile), and link them in the same transaction; see ``Storage.add_nodes``."""
        with self._db.write() as cur:
            workflow_id = graph.adder(cur, adder, token)
            if workflow_id is None:
                return None
            parents = {p for s in specs if s.node for p in s.node.parents}
            check_added(workflow_id, specs, graph.known(cur, workflow_id, parents),
                        graph.taken(cur, workflow_id, [s.id for s in specs]))
            now = self._clock.at(cur)
            stored = jobs.insert(cur, self._clock.arg(), specs, self._schema)
            graph.store(cur, now, specs, stored)
            groups.stored(cur, now, specs, stored)
            graph.attach(cur, now, [r.id for r in stored if r.created])
        return stored

    def gather(self, lead: str, token: str) -> list[LeasedJob] | None:
        """Lease the members of ``lead``'s group for its run; see ``Storage.gather``."""
        with self._db.write() as cur:
            return groups.gather(cur, self._clock.at(cur), lead, token)

    def heartbeat(
        self, info: WorkerInfo, leases: Mapping[str, str], lease_seconds: float
    ) -> HeartbeatReply:
        """Register the worker, extend its leases, report lost/cancelled jobs and a command:
        one call of the server-side ``heartbeat``."""
        ids = sorted(leases)
        with self._db.call() as cur:
            rows = cur.execute(_HEARTBEAT, (
                self._clock.arg(), enc(info.id), json.dumps(info.to_wire()), arrays.texts(ids),
                arrays.texts(leases[i] for i in ids), lease_seconds)).fetchall()
        held = [(job_id, cancel) for _, job_id, cancel in rows if job_id is not None]
        return HeartbeatReply(
            lost=frozenset(set(leases) - {job_id for job_id, _ in held}),
            cancel=frozenset(job_id for job_id, cancel in held if cancel),
            command=rows[0][0] if rows else None,
        )

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry."""
        with self._db.write() as cur:
            cur.execute("DELETE FROM workers WHERE id = %s", (enc(worker_id),))

    def check_server(self) -> list[str]:
        """Warnings about server settings that can lose jobs: ``fsync`` or
        ``full_page_writes`` off (a crash of the machine can corrupt the database).
        ``synchronous_commit=off`` is not warned about: it loses at most the last moments of
        commits, as Redis's ``appendfsync everysec`` does. A role that cannot write raises
        ``StorageReadOnly``."""
        with self._db.outages():
            row = self._db.read().execute(_SERVER_CHECK).fetchone() or ("", "", "", True)
        names = ("fsync", "full_page_writes")
        found = [f"PostgreSQL runs with {name}=off: a crash of its machine can lose or corrupt "
                 "jobs" for name, value in zip(names, row[:2], strict=True) if value == "off"]
        if row[2] == "on" or not row[3]:
            raise StorageReadOnly(
                "this PostgreSQL role cannot write conveyor's tables (read-only transaction or "
                "no INSERT/UPDATE on them): a worker cannot take a job; grant the role write "
                "access (docs/postgres.md, privileges)")
        return found

    def bind(self, connection: object) -> PostgresStorage:
        """This storage writing in the open transaction of your own connection (``bound.py``)."""
        return PostgresStorage(self._db.settings, self._binder.database(connection),
                               self._clock.clock, self._notices)

    def close(self) -> None:
        """Release this process's connections. Idempotent."""
        self._listener.close()
        self._notices.close()
        self._db.close()


def _leased(row: Sequence[Any]) -> LeasedJob:
    return LeasedJob(
        id=row[0], name=row[1], queue=row[2], payload=row[3], token=row[4],
        attempt=row[5], errors=row[6], max_retries=row[7], timeout=row[8], batch_id=row[9],
        recoveries=row[10], cost=row[11],
    )
