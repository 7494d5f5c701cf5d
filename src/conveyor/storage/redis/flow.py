"""Flow control on Redis: pausing a queue, and where the per-job limits live.

A paused queue has the field ``paused`` in its meta hash; ``dequeue.lua`` leases nothing from
it. The per-job limits (``FlowControl``: unique, concurrency, order and rate keys) are applied
inside the scripts, atomically with the transition they gate, so their code is Lua:

* ``enqueue.lua`` takes and honours unique locks (the queue's ``unique`` hash: key ->
  "expiry|job id"); ``trim.lua`` drops a lock that still names a trimmed job.
* ``lua/_admit.lua`` (dequeue) admits a job when its concurrency count (``c:<key>`` in the
  queue's ``flow`` hash), its order key's holder (``o:<key>``) and its rate log
  (``lua/_rates.lua``, the ``rates``/``rate_ends`` zsets) allow; a job held back waits in the
  ``parked`` zset, oldest first, and is considered again before the list.
* ``lua/_flow.lua`` gives a slot and an order key back when a job stops (ack, reclaim, cancel,
  kill, delete).
* ``lua/_breakers.lua`` holds the jobs of an open breaker key in the same gate (its probe
  passes), ``lua/_breaker_acks.lua`` updates the key in ``ack.lua`` (``breakers.py``).

Only jobs whose state line has ``flow_controlled`` set read their static JSON for limits.
Limits and breakers apply per queue, since a script touches its queue's slot only.
"""

from __future__ import annotations

from conveyor.storage.redis.context import RedisContext

PAUSED = "paused"  # the meta hash field dequeue.lua checks


class RedisFlow:
    """Pausing and resuming queues."""

    def __init__(self, ctx: RedisContext) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts

    def pause_queue(self, queue: str) -> None:
        """Stop every worker from taking jobs from ``queue``."""
        self.link.call("HSET", self.ctx.register_queue(queue).meta, PAUSED, 1)

    def resume_queue(self, queue: str) -> None:
        """Undo ``pause_queue`` and wake idle workers."""
        qk = self.ctx.register_queue(queue)
        self.link.call("HDEL", qk.meta, PAUSED)
        self.link.call("LPUSH", qk.notify, "1")
        self.ctx.ring(queue, 1)
