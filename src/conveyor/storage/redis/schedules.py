"""Periodic schedules on Redis: a hash of definitions, a set of paused names, a zset of ticks.

Plain commands on three single keys (no script), so they work unchanged on Redis Cluster. The
last tick is a sorted-set score written with ``ZADD GT``: a late writer of an older tick never
moves it back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from conveyor.job import ScheduleInfo
from conveyor.storage.redis.connection import Link
from conveyor.storage.redis.keys import Keys


class RedisSchedules:
    """The schedule part of ``Storage`` and ``Inspector`` on one Redis deployment."""

    link: Link
    keys: Keys

    def save_schedules(self, schedules: Sequence[ScheduleInfo]) -> None:
        """Create or update definitions; paused flags and last ticks are kept."""
        if schedules:
            flat = [x for s in schedules for x in (s.name, json.dumps(s.definition()))]
            self.link.call("HSET", self.keys.schedules, *flat)

    def paused_schedules(self) -> set[str]:
        """Names of paused schedules."""
        return set(self.link.call("SMEMBERS", self.keys.schedules_paused))

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick."""
        self.link.call("ZADD", self.keys.schedule_ticks, "GT", repr(float(tick)), name)

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        defs: dict[str, str] = self.link.call("HGETALL", self.keys.schedules)
        paused = self.paused_schedules()
        ticks = _pairs(self.link.call("ZRANGE", self.keys.schedule_ticks, 0, -1, "WITHSCORES"))
        out = []
        for name in sorted(defs):
            d = json.loads(defs[name])
            tick = ticks.get(name)
            out.append(ScheduleInfo(
                name=name, cron=d["cron"], tz=d["tz"], job_name=d["job_name"],
                queue=d["queue"], paused=name in paused,
                last_tick=None if tick is None else float(str(tick))))
        return out

    def pause_schedule(self, name: str) -> bool:
        """Pause a schedule; False if unknown."""
        if not self.link.call("HEXISTS", self.keys.schedules, name):
            return False
        self.link.call("SADD", self.keys.schedules_paused, name)
        return True

    def resume_schedule(self, name: str) -> bool:
        """Resume a schedule; False if unknown."""
        if not self.link.call("HEXISTS", self.keys.schedules, name):
            return False
        self.link.call("SREM", self.keys.schedules_paused, name)
        return True


def _pairs(reply: list[Any]) -> dict[str, Any]:
    """A WITHSCORES reply as a dict, whether the client paired it (RESP3) or not (RESP2)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return {str(pair[0]): pair[1] for pair in reply}
    return {str(k): v for k, v in zip(reply[::2], reply[1::2], strict=True)}
