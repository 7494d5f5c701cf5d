"""The transitions workers make on the side, on Redis: promotion of due jobs (and the sweep
that settles workflows a crash left marked), recovery of lost leases (expired, or a dead
worker's: ``lua/release.lua`` runs per queue, a page of its active jobs per call, and
recovers them exactly as ``reclaim.lua`` recovers expired ones, both with
``lua/_recover.lua``), cancel, the worker registry's removals, and retention trimming. A part
of ``RedisStorage``; every script's moves are fed to ``graph.sync_batches``.
"""

from __future__ import annotations

import dataclasses

from conveyor.core.job import JobState
from conveyor.storage.redis.admin import RedisAdmin
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.durable import RedisDurable
from conveyor.storage.redis.graph import RedisGraph
from conveyor.storage.redis.repair import PendingRepair
from conveyor.storage.retention import Retention

TRIM_CHUNK = 500  # finished jobs deleted per trim.lua call
TRIM_MAX = 10_000  # per queue and trim() call
SCAN_COUNT = 200  # job records checked per queue and reclaim call for lost lease entries
RELEASE_PAGE = 200  # active jobs looked at per release.lua call


class RedisUpkeep:
    """Promotion, recovery, cancel, the worker registry's removals and trimming on one
    deployment."""

    def __init__(self, ctx: RedisContext, graph: RedisGraph, admin: RedisAdmin,
                 repair: PendingRepair, durable: RedisDurable) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._graph = graph
        self._admin = admin
        self._repair = repair
        self._durable = durable  # its kept events are swept at trim
        self._scan: dict[str, str] = {}  # reclaim's HSCAN cursor per queue

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry."""
        self.link.call("ZREM", self.keys.workers, worker_id)
        self.link.call("HDEL", self.keys.worker_info, worker_id)
        self.link.call("DEL", self.keys.worker_command(worker_id))

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time has come → pending."""
        total = 0
        for queue in self.ctx.known_queues():
            moved, moves, ready = self.scripts.run(
                "promote", self.keys.queue(queue), [self.ctx.now_arg(), queue, limit])
            self._graph.sync_batches(moves)
            self.ctx.ring(queue, int(ready))
            total += int(moved)
        self._graph.settle_marked()  # the sweep: workflows whose marks a crash left unsettled
        return total

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Expired leases → pending (or dead past ``max_recoveries``); also finds active jobs
        whose lease entry is missing, a slice of the records per call, and advances the
        queue's pass that puts back pending jobs missing from their list (``repair.py``)."""
        total = 0
        for queue in self.ctx.known_queues():
            cursor = self._scan.get(queue, "0")
            done, moves, next_cursor = self.scripts.run(
                "reclaim", self.keys.queue(queue),
                [self.ctx.now_arg(), queue, max_recoveries, limit, cursor, SCAN_COUNT])
            self._scan[queue] = next_cursor or "0"
            self._graph.sync_batches(moves)
            self.ctx.ring(queue, int(done))
            total += int(done)
            self._repair.advance(queue)
        return total

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one."""
        queue = self.ctx.find_queue(job_id)
        if queue is None:
            return None
        (states,) = self._admin.run_each("cancel", {queue: [job_id]})
        return JobState(states[0]) if states and states[0] else None

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        total = 0
        for queue in self.ctx.known_queues():
            above = "-inf"
            while above:
                done, moves, above = self.scripts.run(
                    "release", self.keys.queue(queue),
                    [self.ctx.now_arg(), queue, max_recoveries, worker_id, above, RELEASE_PAGE])
                self._graph.sync_batches(moves)
                self.ctx.ring(queue, int(done))
                total += int(done)
        self.unregister_worker(worker_id)
        return total

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, finished batches and silent workers past retention."""
        removed = 0
        for queue in self.ctx.known_queues():
            for _ in range(TRIM_MAX // TRIM_CHUNK):  # short calls: others are served between
                deleted = int(self.scripts.run(
                    "trim", self.keys.queue(queue),
                    [self.ctx.now_arg(), queue, retention.succeeded_seconds,
                     retention.failed_seconds, retention.dead_seconds, retention.dead_max,
                     TRIM_CHUNK]))
                removed += deleted
                if deleted < TRIM_CHUNK:
                    break
        now = self.ctx.now()
        self._durable.sweep()
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
