"""``Storage.dequeue``, ``wait`` and ``wait_dequeue`` on Redis: leases by ``lua/dequeue.lua``
(one call per queue and ``MAX_DEQUEUE`` jobs), idle waits by ``BLPOP`` on the wake-up lists.

Acks carried with a lease (``acks=``) are sent ahead of it in the same write: each chunk's
first ack.lua call, then the lease (behind a ``BLPOP`` when waiting: the acks run before
the pop blocks, so none waits behind it). Redis runs the commands of one connection in
order, so a slot an ack frees is leased by the call behind it. What ack.lua leaves for a
second step (a batch job's outcome, after its batch is counted) completes after the
lease, as ``RedisAcks.ack`` completes it. The scripts are unchanged: only the sending is
composed. Where one write cannot carry both (commands spanning Cluster nodes, or
``wait_replicas``, whose ``WAIT`` must follow the acks alone) the acks go first, apart.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import redis
from conveyor.core.job import Ack, LeasedJob, Outcome
from conveyor.errors import StorageUnavailable
from conveyor.storage.base import Leases
from conveyor.storage.redis import codec
from conveyor.storage.redis.acks import Carried, RedisAcks
from conveyor.storage.redis.connection import REDIRECTS, TRANSIENT
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.graph import RedisGraph

__all__ = ["MAX_BLOCK", "MAX_DEQUEUE", "RedisLeases"]

log = logging.getLogger("conveyor.storage.redis")

MAX_DEQUEUE = 1000  # jobs per dequeue.lua call
MAX_BLOCK = 25.0  # seconds; below the socket timeout
_NO_ACKS = Carried((), [], [])


class RedisLeases:
    """The lease part of ``Storage`` on one Redis deployment."""

    def __init__(self, ctx: RedisContext, graph: RedisGraph, acks: RedisAcks) -> None:
        self.ctx, self.settings = ctx, ctx.settings
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._graph = graph
        self._acks = acks

    def dequeue(
        self, queues: Sequence[str], worker_id: str, count: int, lease_seconds: float,
        capacity: int = 0, acks: Sequence[Ack] = (),
    ) -> Leases:
        """Lease jobs up to ``count`` slots (a job takes its cost), one script call per
        queue until filled; ``acks`` ride ahead of the first call."""
        codec.check_text("worker id", worker_id)
        out = Leases()
        carried = self._carried(acks, out, queues[:1] if count > 0 else (), worker_id)
        used = 0
        for queue in queues:
            while used < count:
                want = min(count - used, MAX_DEQUEUE)
                args = self._dequeue_args(queue, worker_id, want, lease_seconds, capacity)
                if carried is not None:
                    leased = self._with_acks(carried, out, queue, args, None)
                    carried = None
                else:
                    leased = self._leased(queue, self.scripts.run(
                        "dequeue", self.keys.queue(queue), args))
                out += leased
                took = sum(job.cost for job in leased)
                used += took
                if took < want:
                    break
        return out

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
        lease_seconds: float, timeout: float, capacity: int = 0, acks: Sequence[Ack] = (),
    ) -> Leases:
        """BLPOP with the first queue's dequeue.lua pipelined behind it (and ``acks`` ahead
        of it): the lease runs the moment the pop returns, with no round trip between.
        Other queues (and more than ``MAX_DEQUEUE`` jobs) are leased after, as ``dequeue``
        does. On Cluster that takes the doorbells' node to own the first queue's slot too
        (and the acks'); otherwise the acks go first, then it waits, then leases."""
        blpop = self._blpop(watch, timeout) if watch and timeout > 0 else None
        if not queues or count <= 0 or blpop is None or not self.link.same_node(
                blpop, self.scripts.command("dequeue", self.keys.queue(queues[0]), [])):
            acked = self._acks.ack(acks) if acks else []
            self.wait(watch, timeout)
            out = self.dequeue(queues, worker_id, count, lease_seconds, capacity)
            out.acked = acked
            return out
        codec.check_text("worker id", worker_id)
        first, want = queues[0], min(count, MAX_DEQUEUE)
        out = Leases()
        carried = self._carried(acks, out, [first], worker_id) or _NO_ACKS
        args = self._dequeue_args(first, worker_id, want, lease_seconds, capacity)
        out += self._with_acks(carried, out, first, args, blpop, timeout)
        used = sum(job.cost for job in out)
        if used < count:
            rest = queues if used == want else queues[1:]
            out += self.dequeue(rest, worker_id, count - used, lease_seconds, capacity)
        return out

    def _carried(self, acks: Sequence[Ack], out: Leases, queues: Sequence[str],
                 worker_id: str) -> Carried | None:
        """The acks to send with the lease of ``queues[0]`` (None: none to send). Those one
        write cannot carry (no lease to carry them, commands spanning Cluster nodes,
        ``wait_replicas``, whose ``WAIT`` follows each ack call) are applied now, apart,
        into ``out.acked``."""
        if not acks:
            return None
        if queues and not self.settings.wait_replicas:
            carried = self._acks.carry(acks)
            lease = self.scripts.command("dequeue", self.keys.queue(queues[0]), [])
            if self.link.same_node(*carried.commands, lease):
                return carried
        out.acked = self._acks.ack(acks)
        return None

    def _with_acks(self, carried: Carried, out: Leases, queue: str, args: list[Any],
                   blpop: tuple[Any, ...] | None, timeout: float = 0.0) -> list[LeasedJob]:
        """Send ``carried``'s acks, the ``blpop`` if any, and the lease of ``queue`` in one
        write; set ``out.acked`` (when acks were carried), return the jobs leased. An ack's
        script error is raised after the jobs leased with it are handed back (pending
        again, no attempt spent)."""
        call = self.scripts.command("dequeue", self.keys.queue(queue), args)
        ahead = [*carried.commands, *([blpop] if blpop else [])]
        try:
            if blpop is None:
                replies = self.link.retrying(lambda: self.link.raw_many(*ahead, call))
            else:
                replies = self.link.raw_many(*ahead, call)
        except TRANSIENT as exc:
            if carried.commands:  # whether they ran is unknown: the caller keeps them
                raise StorageUnavailable(self.link.unreachable(exc)) from None
            self._wait_failed(exc, timeout)
            return []
        reply = replies[-1]
        leased = [] if isinstance(reply, Exception) else self._leased(queue, reply)
        late = False
        if carried.commands:
            try:
                out.acked, late = self._acks.finish(carried, replies[:len(carried.commands)])
            except Exception:
                self._hand_back(leased)
                raise
        if isinstance(reply, Exception):
            if not isinstance(reply, (redis.exceptions.NoScriptError, *REDIRECTS)):
                if isinstance(reply, redis.ResponseError):
                    reply = self.scripts.scripts["dequeue"].located(reply)
                raise self.link.refused(reply)
            # NOSCRIPT, or a slot moved: the script runner copes
            return self._leased(queue, self.scripts.run("dequeue", self.keys.queue(queue), args))
        room = int(args[3]) - sum(job.cost for job in leased)
        if late and room > 0:  # acks applied after the lease: what they freed is leased now
            # a fresh token prefix: tokens and rate-window members must not repeat
            again = [*args[:3], room, args[4], os.urandom(8).hex() + ".", *args[6:]]
            leased += self._leased(queue, self.scripts.run("dequeue", self.keys.queue(queue),
                                                           again))
        return leased

    def _hand_back(self, jobs: Sequence[LeasedJob]) -> None:
        if jobs:
            self._acks.ack([Ack(job.id, job.token, Outcome.INTERRUPTED,
                                message="handed back: an ack sent with its lease failed")
                            for job in jobs])

    def _dequeue_args(self, queue: str, worker_id: str, want: int, lease_seconds: float,
                      capacity: int) -> list[Any]:
        prefix = os.urandom(8).hex() + "."  # tokens: prefix, sequence, "/queue"
        return [self.ctx.now_arg(), queue, worker_id, want, repr(float(lease_seconds)), prefix,
                capacity]

    def _leased(self, queue: str, reply: Any) -> list[LeasedJob]:
        """Decode a dequeue.lua reply and feed its batch moves to the batch counters."""
        rows, moves = reply
        self._graph.sync_batches(moves, confirm=False)  # its own leases, not run yet
        return [codec.leased(row, queue) for row in rows]

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
