"""The Redis storage (Redis, Valkey, Redis Cluster): each transition is one Lua script on
one queue's hash slot; leases are compared with the server's clock and fenced by tokens.

``open_redis(url, clock)`` is what ``conveyor.storage.open_storage`` calls for
``redis://``, ``rediss://``, ``valkey://``, ``redis+cluster://`` and ``redis+sentinel://``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from redis.cluster import RedisCluster

import redis
from conveyor.core.clock import Clock, SystemClock
from conveyor.core.job import (
    BatchSpec,
    EnqueueResult,
    Event,
    HeartbeatReply,
    JobSpec,
    JobState,
    LeasedJob,
)
from conveyor.errors import BatchNotFound, StorageUnavailable, StorageURLError
from conveyor.storage import redact, without_secrets
from conveyor.storage.aio import ThreadedAsync
from conveyor.storage.batch_wait import BatchWaiter, sleeping
from conveyor.storage.records import Retention, WorkerInfo
from conveyor.storage.redis import codec
from conveyor.storage.redis.acks import RedisAcks
from conveyor.storage.redis.aio import RedisAsync
from conveyor.storage.redis.batch_wait import BatchSubscriptions
from conveyor.storage.redis.connection import (
    REDIRECTS,
    TRANSIENT,
    Link,
    Settings,
    make_client,
    parse_url,
)
from conveyor.storage.redis.outbox import RedisOutbox
from conveyor.storage.redis.repair import PendingRepair
from conveyor.storage.redis.schedules import RedisSchedules

log = logging.getLogger("conveyor.storage.redis")

MAX_DEQUEUE = 1000  # jobs per dequeue.lua call
TRIM_CHUNK = 500  # finished jobs deleted per trim.lua call
TRIM_MAX = 10_000  # per queue and trim() call
SCAN_COUNT = 200  # job records checked per queue and reclaim call for lost lease entries
MAX_BLOCK = 25.0  # seconds; below the socket timeout


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


class RedisStorage(RedisOutbox, RedisSchedules, RedisAcks, RedisAsync, ThreadedAsync):
    """``Storage`` and ``Inspector`` on Redis."""

    def __init__(self, settings: Settings, link: Link, clock: Clock | None) -> None:
        super().__init__(settings, link, clock)
        self.repair = PendingRepair(self)
        self._batch_waits = BatchSubscriptions(link)  # one subscription for every wait

    # -- hot path -----------------------------------------------------------------------

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs; one script call per queue and chunk of 2,000."""
        return self.enqueue_specs(specs)

    def dequeue(
        self, queues: Sequence[str], worker_id: str, count: int, lease_seconds: float,
        capacity: int = 0,
    ) -> list[LeasedJob]:
        """Lease up to ``count`` jobs, one script call per queue until filled."""
        out: list[LeasedJob] = []
        codec.check_text("worker id", worker_id)
        for queue in queues:
            while len(out) < count:
                want = min(count - len(out), MAX_DEQUEUE)
                leased = self._leased(queue, self.scripts.run(
                    "dequeue", self.keys.queue(queue),
                    self._dequeue_args(queue, worker_id, want, lease_seconds)))
                out += leased
                if len(leased) < want:
                    break
        return out

    def _dequeue_call(self, queue: str, worker_id: str, want: int, lease_seconds: float
                      ) -> tuple[Any, ...]:
        """One dequeue.lua call as an EVALSHA command, for sending it by hand."""
        keys = self.scripts.keys("dequeue", self.keys.queue(queue))
        return ("EVALSHA", self.scripts.shas["dequeue"], len(keys), *keys,
                *self._dequeue_args(queue, worker_id, want, lease_seconds))

    def _dequeue_args(self, queue: str, worker_id: str, want: int, lease_seconds: float
                      ) -> list[Any]:
        prefix = os.urandom(8).hex() + "."  # tokens: prefix, sequence, "/queue"
        return [self.now_arg(), queue, worker_id, want, repr(float(lease_seconds)), prefix]

    def _leased(self, queue: str, reply: Any) -> list[LeasedJob]:
        """Decode a dequeue.lua reply and feed its batch moves to the batch counters."""
        rows, moves = reply
        self.sync_batches(moves)
        return [codec.leased(row, queue) for row in rows]

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """BLPOP the queues' wake-up lists: their notify lists on one server, their
        doorbells (all in one slot) on Cluster."""
        if not queues or timeout <= 0:
            return False
        try:
            return self.link.raw(*self._blpop(queues, timeout)) is not None
        except TRANSIENT as exc:
            self._wait_failed(exc, timeout)
            return False

    def wait_dequeue(
        self, watch: Sequence[str], queues: Sequence[str], worker_id: str, count: int,
        lease_seconds: float, timeout: float, capacity: int = 0,
    ) -> list[LeasedJob]:
        """BLPOP with the first queue's dequeue.lua pipelined behind it: the lease runs the
        moment the pop returns, with no round trip between. Other queues (and more than
        ``MAX_DEQUEUE`` jobs) are leased after, as ``dequeue`` does. On Cluster that takes the
        doorbells' node to own the first queue's slot too; otherwise it waits, then leases."""
        if not watch or not queues or timeout <= 0 or count <= 0:
            self.wait(watch, timeout)
            return self.dequeue(queues, worker_id, count, lease_seconds)
        codec.check_text("worker id", worker_id)
        first, want = queues[0], min(count, MAX_DEQUEUE)
        blpop = self._blpop(watch, timeout)
        lease = self._dequeue_call(first, worker_id, want, lease_seconds)
        if not self.link.same_node(blpop, lease):
            self.wait(watch, timeout)
            return self.dequeue(queues, worker_id, count, lease_seconds)
        try:
            _, reply = self.link.raw_many(blpop, lease)
        except TRANSIENT as exc:
            self._wait_failed(exc, timeout)
            return []
        if isinstance(reply, Exception):  # NOSCRIPT, or a slot moved: the plain path copes
            if not isinstance(reply, (redis.exceptions.NoScriptError, *REDIRECTS)):
                if isinstance(reply, redis.exceptions.ResponseError):
                    reply = self.scripts.scripts["dequeue"].located(reply)
                raise self.link.refused(reply)
            return self.dequeue(queues, worker_id, count, lease_seconds)
        out = self._leased(first, reply)
        if len(out) < count:
            rest = queues if len(out) == want else queues[1:]
            out += self.dequeue(rest, worker_id, count - len(out), lease_seconds)
        return out

    def _blpop(self, queues: Sequence[str], timeout: float) -> tuple[Any, ...]:
        if self.settings.cluster:
            keys = [self.keys.doorbell(q) for q in queues]
        else:
            keys = [self.keys.queue(q).notify for q in queues]
        block = min(max(timeout, 0.01), MAX_BLOCK)
        return ("BLPOP", *keys, f"{block:.3f}")

    def _wait_failed(self, exc: Exception, timeout: float) -> None:
        # A restart of Redis: report no work; the worker's next call reconnects.
        log.warning("waiting for work on Redis at %s failed: %s",
                    self.link.where, self.link.scrub(exc))
        time.sleep(min(timeout, 0.5))

    def log(self, job_id: str, token: str, events: Sequence[Event],
            progress: tuple[int, int] | None = None) -> bool:
        """Append a running job's messages and progress, fenced by its token."""
        queue = self.find_queue(job_id, token)
        if queue is None:
            return False
        return bool(self.scripts.run(
            "log", self.keys.queue(queue),
            [self.now_arg(), queue, job_id, token, codec.ndjson(events),
             codec.progress_arg(progress)]))

    def heartbeat(
        self, info: WorkerInfo, leases: Mapping[str, str], lease_seconds: float
    ) -> HeartbeatReply:
        """Extend the worker's leases (one script per queue) and refresh its registry entry."""
        lost: set[str] = set()
        cancel: set[str] = set()
        by_queue: dict[str, list[str]] = defaultdict(list)
        for job_id, token in leases.items():
            queue = self.find_queue(job_id, token)
            if queue is None:
                lost.add(job_id)
            else:
                by_queue[queue] += [job_id, token]
        for queue, flat in by_queue.items():
            gone, cancelled = self.scripts.run(
                "extend", self.keys.queue(queue),
                [self.now_arg(), queue, repr(float(lease_seconds)), *flat])
            lost.update(gone)
            cancel.update(cancelled)
        now = self.now()
        seen = dataclasses.replace(info, last_seen=now)
        self.link.call("HSET", self.keys.worker_info, info.id, json.dumps(seen.to_wire()))
        self.link.call("ZADD", self.keys.workers, now, info.id)
        command = self.link.call("GETDEL", self.keys.worker_command(info.id))
        return HeartbeatReply(lost=frozenset(lost), cancel=frozenset(cancel), command=command)

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry."""
        self.link.call("ZREM", self.keys.workers, worker_id)
        self.link.call("HDEL", self.keys.worker_info, worker_id)
        self.link.call("DEL", self.keys.worker_command(worker_id))

    # -- background ---------------------------------------------------------------------

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time has come → pending."""
        total = 0
        for queue in self.known_queues():
            moved, moves, ready = self.scripts.run(
                "promote", self.keys.queue(queue), [self.now_arg(), queue, limit])
            self.sync_batches(moves)
            self.ring(queue, int(ready))
            total += int(moved)
        self.settle_marked()  # the sweep: workflows whose marks a crash left unsettled
        return total

    def gather(self, lead: str, token: str) -> list[LeasedJob] | None:
        """Lease the members of ``lead``'s group for its run; see ``Storage.gather``."""
        queue = token.rpartition("/")[2]  # a lease token ends with its queue (_lease.lua)
        reply = self.scripts.run("gather", self.keys.queue(queue),
                                 [self.now_arg(), queue, lead, token])
        if not reply:
            return None
        rows, moves = reply
        self.sync_batches(moves)
        return [codec.leased(row, queue) for row in rows]

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Expired leases → pending (or dead past ``max_recoveries``); also finds active jobs
        whose lease entry is missing, a slice of the records per call, and advances the
        queue's pass that puts back pending jobs missing from their list (``repair.py``)."""
        total = 0
        for queue in self.known_queues():
            cursor = self._scan.get(queue, "0")
            done, moves, next_cursor = self.scripts.run(
                "reclaim", self.keys.queue(queue),
                [self.now_arg(), queue, max_recoveries, limit, cursor, SCAN_COUNT])
            self._scan[queue] = next_cursor or "0"
            self.sync_batches(moves)
            self.ring(queue, int(done))
            total += int(done)
            self.repair.advance(queue)
        return total

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one."""
        queue = self.find_queue(job_id)
        if queue is None:
            return None
        (states,) = self.run_each("cancel", {queue: [job_id]})
        return JobState(states[0]) if states and states[0] else None

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch with its callbacks stored for later."""
        if self.link.call("EXISTS", self.keys.batch(spec.id).batch):
            return  # creating an existing batch again changes nothing
        now = self.now()
        fields: list[object] = ["id", spec.id, "c", repr(now), "total", 0,
                                "meta", json.dumps(dict(spec.meta)), "kind", spec.kind]
        if spec.description is not None:
            fields += ["desc", spec.description]
        for event, cb in spec.callbacks.items():
            fields += [f"cb:{event}", codec.spec_to_json(cb)]
        self.link.call("HSET", self.keys.batch(spec.id).batch, *fields)
        self.link.call("ZADD", self.keys.batches, now, spec.id)

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch fully enqueued; it completes when every job is terminal."""
        if self.batch_call(batch_id, "close", []) == "missing":
            raise BatchNotFound(f"no batch {batch_id!r}")

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, finished batches and silent workers past retention."""
        removed = 0
        for queue in self.known_queues():
            for _ in range(TRIM_MAX // TRIM_CHUNK):  # short calls: others are served between
                deleted = int(self.scripts.run(
                    "trim", self.keys.queue(queue),
                    [self.now_arg(), queue, retention.succeeded_seconds,
                     retention.failed_seconds, retention.dead_seconds, retention.dead_max,
                     TRIM_CHUNK]))
                removed += deleted
                if deleted < TRIM_CHUNK:
                    break
        now = self.now()
        self._trim_batches(now - retention.batch_seconds)
        for worker_id in self.link.call("ZRANGEBYSCORE", self.keys.workers, "-inf",
                                        now - retention.worker_ttl):
            self.unregister_worker(worker_id)
        return removed

    def _trim_batches(self, before: float) -> None:
        for batch_id in self.link.call("ZRANGEBYSCORE", self.keys.batches, "-inf", before):
            bk = self.keys.batch(batch_id)
            if self.link.call("HEXISTS", bk.batch, "fa") or not self.link.call(
                    "EXISTS", bk.batch):
                # UNLINK frees a big batch's keys in the background, DEL would block Redis.
                self.link.call("UNLINK", *dataclasses.astuple(bk))
                self.link.call("ZREM", self.keys.batches, batch_id)

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
