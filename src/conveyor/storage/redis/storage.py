"""The Redis storage (Redis, Valkey, Redis Cluster): each transition is one Lua script on
one queue's hash slot; leases are compared with the server's clock and fenced by tokens.

``open_redis(url, clock)`` is what ``conveyor.storage.open_storage`` calls for
``redis://``, ``rediss://``, ``valkey://``, ``redis+cluster://`` and ``redis+sentinel://``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

from redis.cluster import RedisCluster

import redis
from conveyor.core.clock import Clock, SystemClock
from conveyor.core.job import Event, HeartbeatReply, LeasedJob
from conveyor.errors import StorageUnavailable, StorageURLError
from conveyor.storage import redact, without_secrets
from conveyor.storage.aio import ThreadedAsync
from conveyor.storage.base import Storage, transactions_refused
from conveyor.storage.batch_wait import BatchWaiter, sleeping
from conveyor.storage.delegate import delegate
from conveyor.storage.redis import codec
from conveyor.storage.redis.acks import RedisAcks
from conveyor.storage.redis.admin import RedisAdmin
from conveyor.storage.redis.aio import RedisAsync
from conveyor.storage.redis.batch_pages import RedisBatchPages
from conveyor.storage.redis.batch_wait import BatchSubscriptions
from conveyor.storage.redis.batches import RedisBatches
from conveyor.storage.redis.breakers import RedisBreakers
from conveyor.storage.redis.connection import (
    Link,
    Settings,
    make_client,
    parse_url,
)
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.durable import RedisDurable
from conveyor.storage.redis.enqueue import RedisEnqueue
from conveyor.storage.redis.flow import RedisFlow
from conveyor.storage.redis.gates import RedisGates
from conveyor.storage.redis.graph import RedisGraph
from conveyor.storage.redis.inspect import RedisInspector
from conveyor.storage.redis.leases import RedisLeases
from conveyor.storage.redis.outbox import RedisOutbox
from conveyor.storage.redis.repair import PendingRepair
from conveyor.storage.redis.schedules import RedisSchedules
from conveyor.storage.redis.upkeep import RedisUpkeep
from conveyor.storage.schedule_edits import ScheduleEdits
from conveyor.storage.workers import WorkerInfo

log = logging.getLogger("conveyor.storage.redis")


def open_redis(url: str, clock: Clock | None = None, *, create: bool = True,
               applied: list[str] | None = None) -> RedisStorage:
    """Connect to the Redis a URL names; raises ``StorageUnavailable`` when it can't.

    Leases and schedules use the server's ``TIME``. Only a clock other than the system
    clock (a test's ``FakeClock``) replaces it: a worker's own wall clock never decides.
    ``create`` and ``applied`` are every opener's (``open_storage``): Redis keys need no
    schema, so nothing is created at open and there is no migration.
    """
    if isinstance(clock, SystemClock):
        clock = None
    try:
        settings = parse_url(url)
        client = make_client(settings)
    except StorageURLError:
        raise
    except (ValueError, TypeError) as exc:  # urllib or redis-py refusing a malformed URL
        raise StorageURLError(f"Redis URL {redact(url)!r} is malformed: "
                              f"{without_secrets(str(exc) or type(exc).__name__, url)}"
                              ) from None
    link = Link(settings, client)
    storage = RedisStorage(settings, link, clock)
    try:
        link.check_open()
    except StorageUnavailable:
        link.close()
        raise
    return storage


class RedisStorage:
    """``Storage`` and ``Inspector`` on Redis: the hot path here, the rest in parts that share
    one ``RedisContext`` (``storage/delegate.py``). Every part feeds the moves its scripts
    report to the one ``RedisGraph`` (batch counters, then workflows), whichever part it is."""

    now = delegate("ctx", RedisContext.now)
    enqueue = delegate("_enqueue", RedisEnqueue.enqueue)
    enqueue_block = delegate("_enqueue", RedisEnqueue.enqueue_block)
    prepare_block = delegate("_enqueue", RedisEnqueue.prepare_block)
    add_nodes = delegate("_enqueue", RedisEnqueue.add_nodes)
    ack = delegate("_acks", RedisAcks.ack)
    dequeue = delegate("_leases", RedisLeases.dequeue)
    wait = delegate("_leases", RedisLeases.wait)
    wait_dequeue = delegate("_leases", RedisLeases.wait_dequeue)
    create_batch = delegate("_batches", RedisBatches.create_batch)
    close_batch = delegate("_batches", RedisBatches.close_batch)
    # upkeep: promotion, recovery, cancel, the worker registry, retention
    unregister_worker = delegate("_upkeep", RedisUpkeep.unregister_worker)
    promote_due = delegate("_upkeep", RedisUpkeep.promote_due)
    reclaim_expired = delegate("_upkeep", RedisUpkeep.reclaim_expired)
    release_worker = delegate("_upkeep", RedisUpkeep.release_worker)
    cancel = delegate("_upkeep", RedisUpkeep.cancel)
    trim = delegate("_upkeep", RedisUpkeep.trim)
    # the Inspector
    queues = delegate("_inspector", RedisInspector.queues)
    get_job = delegate("_inspector", RedisInspector.get_job)
    list_jobs = delegate("_inspector", RedisInspector.list_jobs)
    count_jobs = delegate("_inspector", RedisInspector.count_jobs)
    job_heads = delegate("_inspector", RedisInspector.job_heads)
    retry_all = delegate("_inspector", RedisInspector.retry_all)
    clear = delegate("_inspector", RedisInspector.clear)
    workers = delegate("_inspector", RedisInspector.workers)
    command_worker = delegate("_inspector", RedisInspector.command_worker)
    get_batch = delegate("_inspector", RedisInspector.get_batch)
    list_batches = delegate("_inspector", RedisInspector.list_batches)
    cancel_batch = delegate("_inspector", RedisInspector.cancel_batch)
    workflow_graph = delegate("_inspector", RedisInspector.workflow_graph)
    history = delegate("_inspector", RedisInspector.history)
    job_totals = delegate("_inspector", RedisInspector.job_totals)
    gate_facts = delegate("_gates", RedisGates.gate_facts)
    retry_jobs = delegate("_admin", RedisAdmin.retry_jobs)
    retry_refusals = delegate("_admin", RedisAdmin.retry_refusals)
    delete_jobs = delegate("_admin", RedisAdmin.delete_jobs)
    kill_jobs = delegate("_admin", RedisAdmin.kill_jobs)
    reseal = delegate("_admin", RedisAdmin.reseal)
    breakers = delegate("_breakers", RedisBreakers.breakers)
    close_breaker = delegate("_breakers", RedisBreakers.close_breaker)
    pause_queue = delegate("_flow", RedisFlow.pause_queue)
    resume_queue = delegate("_flow", RedisFlow.resume_queue)
    # schedules (Storage and Inspector)
    schedule_ticked = delegate("_schedules", RedisSchedules.schedule_ticked)
    schedules = delegate("_schedules", RedisSchedules.schedules)
    schedule_changes = delegate("_schedules", RedisSchedules.schedule_changes)
    save_schedules = delegate("_edits", ScheduleEdits.save_schedules)
    schedule_pauses = delegate("_edits", ScheduleEdits.schedule_pauses)
    pause_schedule = delegate("_edits", ScheduleEdits.pause_schedule)
    resume_schedule = delegate("_edits", ScheduleEdits.resume_schedule)
    add_schedule = delegate("_edits", ScheduleEdits.add_schedule)
    change_schedule = delegate("_edits", ScheduleEdits.change_schedule)
    reset_schedule = delegate("_edits", ScheduleEdits.reset_schedule)
    remove_schedule = delegate("_edits", ScheduleEdits.remove_schedule)
    # the Outbox
    publish_due = delegate("_outbox", RedisOutbox.publish_due)
    publish_failed = delegate("_outbox", RedisOutbox.publish_failed)
    start = delegate("_outbox", RedisOutbox.start)
    order_keys = delegate("_outbox", RedisOutbox.order_keys)
    bury = delegate("_outbox", RedisOutbox.bury)
    # asyncio: natively where it can, else the blocking calls in a thread
    aenqueue = delegate("_async", RedisAsync.aenqueue)
    aget_job = delegate("_threaded", ThreadedAsync.aget_job)
    afinished = delegate("_async", RedisAsync.afinished)
    aclose = delegate("_async", RedisAsync.aclose)

    def __init__(self, settings: Settings, link: Link, clock: Clock | None) -> None:
        self.url = settings.url
        self.settings = settings
        self.ctx = ctx = RedisContext(settings, link, clock)
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        # A batch's callback is enqueued as any job: the one cycle between parts (enqueue
        # joins batches, a batch fires callbacks), so the batches, made first, reach the
        # enqueue part through this call, bound when it runs.
        self._batches = RedisBatches(ctx, lambda specs: self._enqueue.enqueue(specs))
        self._graph = RedisGraph(ctx, self._batches)
        self._enqueue = RedisEnqueue(ctx, self._batches, self._graph)
        self._acks = RedisAcks(ctx, self._graph)
        self._leases = RedisLeases(ctx, self._graph, self._acks)
        self._admin = RedisAdmin(ctx, self._graph)
        self.repair = PendingRepair(ctx)
        self.durable = RedisDurable(ctx, self._graph)
        self._upkeep = RedisUpkeep(ctx, self._graph, self._admin, self.repair, self.durable)
        self._pages = RedisBatchPages(ctx, self._batches)
        self._inspector = RedisInspector(ctx, self._batches, self._pages, self._admin)
        self._flow = RedisFlow(ctx)
        self._breakers = RedisBreakers(ctx)
        self._gates = RedisGates(ctx, self._inspector, self._breakers)
        self._schedules = RedisSchedules(ctx)
        self._edits = ScheduleEdits(self.now, self._schedules)
        self._outbox = RedisOutbox(ctx, self._graph)
        self._threaded = ThreadedAsync(self._enqueue.enqueue, self._inspector.get_job)
        self._async = RedisAsync(ctx, self._threaded)
        self._batch_waits = BatchSubscriptions(link)  # one subscription for every wait

    def __repr__(self) -> str:
        return f"<RedisStorage {self.link.where} prefix={self.settings.prefix!r}>"

    def bind(self, connection: object) -> Storage:
        """Refuse: this storage cannot write inside someone else's transaction (Redis is not
        the application's database)."""
        raise transactions_refused(self.url, connection)

    # -- hot path -----------------------------------------------------------------------

    def log(self, job_id: str, token: str, events: Sequence[Event],
            progress: tuple[int, int] | None = None) -> bool:
        """Append a running job's messages and progress, fenced by its token."""
        queue = self.ctx.find_queue(job_id, token)
        if queue is None:
            return False
        return bool(self.scripts.run(
            "log", self.keys.queue(queue),
            [self.ctx.now_arg(), queue, job_id, token, codec.ndjson(events),
             codec.progress_arg(progress)]))

    def heartbeat(
        self, info: WorkerInfo, leases: Mapping[str, str], lease_seconds: float
    ) -> HeartbeatReply:
        """Extend the worker's leases (one script per queue) and refresh its registry entry."""
        lost: set[str] = set()
        cancel: set[str] = set()
        by_queue: dict[str, list[str]] = defaultdict(list)
        for job_id, token in leases.items():
            queue = self.ctx.find_queue(job_id, token)
            if queue is None:
                lost.add(job_id)
            else:
                by_queue[queue] += [job_id, token]
        for queue, flat in by_queue.items():
            gone, cancelled = self.scripts.run(
                "extend", self.keys.queue(queue),
                [self.ctx.now_arg(), queue, repr(float(lease_seconds)), *flat])
            lost.update(gone)
            cancel.update(cancelled)
        now = self.now()
        seen = dataclasses.replace(info, last_seen=now)
        self.link.call("HSET", self.keys.worker_info, info.id, json.dumps(seen.to_wire()))
        self.link.call("ZADD", self.keys.workers, now, info.id)
        command = self.link.call("GETDEL", self.keys.worker_command(info.id))
        return HeartbeatReply(lost=frozenset(lost), cancel=frozenset(cancel), command=command)

    # -- background ---------------------------------------------------------------------

    def gather(self, lead: str, token: str) -> list[LeasedJob] | None:
        """Lease the members of ``lead``'s group for its run; see ``Storage.gather``."""
        queue = token.rpartition("/")[2]  # a lease token ends with its queue (_lease.lua)
        reply = self.scripts.run("gather", self.keys.queue(queue),
                                 [self.ctx.now_arg(), queue, lead, token])
        if not reply:
            return None
        rows, moves = reply
        self._graph.sync_batches(moves, confirm=False)  # its own leases, not run yet
        return [codec.leased(row, queue) for row in rows]

    def batch_finished(self, batch_id: str) -> AbstractContextManager[BatchWaiter]:
        """Wake-ups as the batch finishes (``redis/batch_wait.py``: the process's shared
        subscription); through Sentinel none (a failover drops a subscription): the waiter
        sleeps."""
        if self.link.settings.sentinel:
            return sleeping()
        return self._batch_waits.watch(self.keys.batch(batch_id).batch)

    def tidy(self) -> bool:
        """Nothing to do: no old row versions pile up here (``Storage.tidy``)."""
        return False

    def check_server(self) -> list[str]:
        """Warnings about server settings that can lose jobs, for the caller to log (the
        worker logs them at start)."""
        warnings = []
        clients = (self.link.client.get_primaries()  # type: ignore[no-untyped-call]
                   if isinstance(self.link.client, RedisCluster)
                   else [None])
        for node in clients:
            try:
                config = (self.link.client.config_get("maxmemory-policy", target_nodes=node)
                          if node is not None
                          else self.link.client.config_get("maxmemory-policy"))
            except redis.ResponseError as exc:
                # An ACL user without CONFIG (``-config``, common on managed Redis): the
                # storage needs no CONFIG to work, so say what could not be checked.
                warnings.append(
                    f"cannot check the maxmemory-policy of Redis at {self.link.where} "
                    f"({self.link.scrub(exc)}); make sure it is noeviction, or Redis may "
                    "evict jobs and leases under memory pressure")
                break
            policy = config.get("maxmemory-policy", "noeviction")
            if policy != "noeviction":
                warnings.append(
                    f"Redis at {self.link.where} has maxmemory-policy {policy}: under memory "
                    "pressure it may evict jobs and leases; set it to noeviction")
        return warnings

    def close(self) -> None:
        """Release connections. Idempotent."""
        self._batch_waits.close()
        if not self.link.closed:
            self.link.close()
