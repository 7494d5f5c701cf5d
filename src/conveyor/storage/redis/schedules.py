"""Periodic schedules on Redis: a hash of definitions, a hash of pause state, zsets of ticks
and of creation times.

Plain commands on three single keys (no script), so they work unchanged on Redis Cluster. The
last tick is a sorted-set score written with ``ZADD GT``: a late writer of an older tick never
moves it back. The pause hash maps a name to ``paused``, or to the time it was last resumed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from conveyor.storage.redis.context import RedisContext
from conveyor.storage.schedule_records import ScheduleInfo

PAUSED = "paused"


class RedisSchedules:
    """The schedule part of ``Storage`` and ``Inspector`` on one Redis deployment."""

    def __init__(self, ctx: RedisContext) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts

    def save_schedules(self, schedules: Sequence[ScheduleInfo]) -> None:
        """Create or update definitions; pause state, last ticks and creation time are kept."""
        if schedules:
            flat = [x for s in schedules for x in (s.name, json.dumps(s.definition()))]
            now = repr(self.ctx.now())
            # NX: only the first save of a name records when the schedule came to be.
            self.link.call("ZADD", self.keys.schedule_created, "NX",
                           *[x for s in schedules for x in (now, s.name)])
            self.link.call("HSET", self.keys.schedules, *flat)

    def schedule_pauses(self) -> dict[str, float | None]:
        """Paused schedules (None) and resumed ones (when)."""
        raw: dict[str, str] = self.link.call("HGETALL", self.keys.schedule_pauses)
        return {name: None if v == PAUSED else float(v) for name, v in raw.items()}

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick."""
        self.link.call("ZADD", self.keys.schedule_ticks, "GT", repr(float(tick)), name)

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        defs: dict[str, str] = self.link.call("HGETALL", self.keys.schedules)
        pauses = self.schedule_pauses()
        ticks = _pairs(self.link.call("ZRANGE", self.keys.schedule_ticks, 0, -1, "WITHSCORES"))
        created = _pairs(self.link.call("ZRANGE", self.keys.schedule_created, 0, -1,
                                        "WITHSCORES"))
        out = []
        for name in sorted(defs):
            d = json.loads(defs[name])
            tick = ticks.get(name)
            out.append(ScheduleInfo(
                name=name, cron=d["cron"], tz=d["tz"], job_name=d["job_name"],
                queue=d["queue"], paused=name in pauses and pauses[name] is None,
                last_tick=None if tick is None else float(str(tick)),
                resumed_at=pauses.get(name),
                created_at=None if name not in created else float(str(created[name]))))
        return out

    def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; False if unknown."""
        if not self.link.call("HEXISTS", self.keys.schedules, name):
            return False
        self.link.call("HSET", self.keys.schedule_pauses, name, PAUSED)
        return True

    def resume_schedule(self, name: str) -> bool:
        """Resume a schedule, noting when; False if unknown."""
        if not self.link.call("HEXISTS", self.keys.schedules, name):
            return False
        # Only a paused schedule gets a resume time: resuming a running one must not stop a
        # restarted worker from catching up ticks it really missed.
        if self.link.call("HGET", self.keys.schedule_pauses, name) == PAUSED:
            self.link.call("HSET", self.keys.schedule_pauses, name, repr(self.ctx.now()))
        return True


def _pairs(reply: list[Any]) -> dict[str, Any]:
    """A WITHSCORES reply as a dict, whether the client paired it (RESP3) or not (RESP2)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return {str(pair[0]): pair[1] for pair in reply}
    return {str(k): v for k, v in zip(reply[::2], reply[1::2], strict=True)}
