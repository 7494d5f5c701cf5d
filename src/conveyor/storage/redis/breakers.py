"""``Inspector.breakers`` and ``close_breaker`` on Redis (docs/operations.md, "Breakers").

The scripts keep the breakers, atomically with the lease and the outcome they gate
(``lua/_breakers.lua``, ``lua/_breaker_acks.lua``: ``storage/breakers.py``'s rules in Lua),
per queue: a script touches its queue's slot only, so a key counts within one queue, and a
key used in several queues has a breaker in each (``BreakerState.queue`` says which).

A key's record is one field of its queue's ``breakers`` hash, TAB-joined: state, opened_at,
probe_at, probe_id, trips, within, the failure log (times joined by spaces), the reason.
"""

from __future__ import annotations

from conveyor.core.breaker import CLOSED, HALF_OPEN, OPEN, BreakerState
from conveyor.storage.breakers import BreakerRow, listed
from conveyor.storage.redis.context import RedisContext

__all__ = ["RedisBreakers", "decode"]

_STATES = (OPEN, HALF_OPEN, CLOSED)


def decode(key: str, raw: object) -> BreakerRow | None:
    """The row of ``key`` from its record; None for none, or for a record that cannot be
    read (the scripts read such a one as closed, so it holds nothing back)."""
    if not isinstance(raw, str):
        return None
    parts = raw.split("\t", 7)
    if len(parts) != 8 or parts[0] not in _STATES:
        return None
    state, opened_at, probe_at, probe_id, trips, within, log, reason = parts
    try:
        return BreakerRow(key, state, [float(t) for t in log.split()], float(within),
                          _time(opened_at), _time(probe_at), probe_id or None, reason or None,
                          int(trips))
    except ValueError:
        return None


def _time(text: str) -> float | None:
    return float(text) if text else None


class RedisBreakers:
    """The operators' view of breakers (a part of ``RedisStorage``): every queue's
    ``breakers`` hash, one read per queue (on Cluster each on its own slot)."""

    def __init__(self, ctx: RedisContext) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts

    def breakers(self) -> list[BreakerState]:
        """Open and half-open breakers first, then closed ones with counted errors; a key
        used in several queues once per queue it has a breaker in."""
        now = self.ctx.now()
        views = []
        for queue in self.ctx.known_queues():
            records: dict[str, str] = self.link.call("HGETALL", self.keys.queue(queue).breakers)
            views += [row.view(now, queue) for key, raw in records.items()
                      if (row := decode(key, raw)) is not None]
        return listed(views)

    def breaker(self, queue: str, key: str) -> BreakerState | None:
        """The breaker of ``key`` in ``queue`` when it holds jobs back (open, half-open)."""
        row = decode(key, self.link.call("HGET", self.keys.queue(queue).breakers, key))
        if row is None or row.state == CLOSED:
            return None
        return row.view(self.ctx.now(), queue)

    def close_breaker(self, key: str) -> bool:
        """Close breaker ``key`` by hand in every queue (its error log cleared; its jobs
        lease at once); True when it was open or half-open in one."""
        closed = False
        for queue in self.ctx.known_queues():
            if self.scripts.run("breaker", self.keys.queue(queue), [self.ctx.now_arg(), key]):
                closed = True
                self.ctx.ring(queue, 1)
        return closed
