"""Redis as a broker's outbox (``conveyor.storage.outbox.Outbox``, docs/internals/outbox.md).

A job handed to a relay leaves its queue's pending list for the queue's ``published`` zset,
scored with when it is due to be published again if no worker starts it by then; a job that
flow control or a pause held back at ``start`` waits in the ``parked`` zset dequeue already
uses, and is due once it would be admitted. Every call is one script on the queue's slot:
``publish.lua``, ``start.lua`` (sharing dequeue's leasing, ``_lease.lua``, and the lease
expiry's takeover, ``_recover.lua``) and ``bury.lua``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from conveyor.storage.outbox import Delivered, StartKind, StartReply, arrivals
from conveyor.storage.redis import codec
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.graph import RedisGraph
from conveyor.storage.rules import REDELIVERED

__all__ = ["RedisOutbox"]


class RedisOutbox:
    """``publish_due``, ``publish_failed``, ``start`` and ``bury`` on Redis; the moves are
    fed to ``graph.sync_batches``."""

    def __init__(self, ctx: RedisContext, graph: RedisGraph) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._graph = graph

    def publish_due(self, queue: str, count: int, republish_after: float) -> list[str]:
        """Pending jobs of ``queue`` due to be published, stamped; see ``Outbox``."""
        if count <= 0:
            return []
        return [str(job_id) for job_id in self.scripts.run(
            "publish", self.ctx.register_queue(queue),
            [self.ctx.now_arg(), queue, count, repr(float(republish_after))])]

    def publish_failed(self, job_ids: Sequence[str]) -> None:
        """Unconfirmed publishes: due again at once (only those still stamped)."""
        for queue, ids in self.ctx.group_by_queue(job_ids).items():
            self.link.call("ZADD", self.keys.queue(queue).published, "XX",
                           *[x for job_id in ids for x in (0, job_id)])

    def start(self, queue: str, deliveries: Sequence[Delivered], worker_id: str,
              lease_seconds: float, max_recoveries: int = 5) -> list[StartReply]:
        """Lease delivered jobs; see ``Outbox.start``."""
        given = arrivals(deliveries)
        if not given:
            return []
        codec.check_text("worker id", worker_id)
        prefix = os.urandom(8).hex() + "."
        args = [self.ctx.now_arg(), queue, worker_id, max_recoveries, repr(float(lease_seconds)),
                prefix, REDELIVERED,
                *[x for job_id, again, message in given
                  for x in (job_id, "1" if again else "0", message or "")]]
        kinds, rows, moves = self.scripts.run("start", self.ctx.register_queue(queue), args)
        self._graph.sync_batches(moves, confirm=False)  # its own leases, not run yet
        leased = iter(codec.leased(row, queue) for row in rows)
        return [StartReply(job_id, StartKind(kind),
                           next(leased) if kind == "started" else None)
                for (job_id, _, _), kind in zip(given, kinds, strict=True)]

    def order_keys(self, queue: str, job_ids: Sequence[str]) -> list[str | None]:
        """Each job's order key, read from its static record; see ``Outbox.order_keys``."""
        if not job_ids:
            return []
        statics = self.link.call("HMGET", self.keys.queue(queue).jobs, *job_ids)
        return [codec.order_key(static) for static in statics]

    def bury(self, job_ids: Sequence[str], reason: str) -> int:
        """Pending or active jobs the broker gave up on → dead; see ``Outbox.bury``."""
        buried = 0
        for queue, ids in self.ctx.group_by_queue(job_ids).items():
            moved, moves = self.scripts.run(
                "bury", self.keys.queue(queue), [self.ctx.now_arg(), queue, reason, *ids])
            self._graph.sync_batches(moves)
            buried += int(moved)
        return buried
