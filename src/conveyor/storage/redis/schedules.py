"""Periodic schedules on Redis: a hash of records (JSON, all but the last tick), a zset of last
ticks and a list of changes (the audit trail), all under the tag ``{schedules}`` so one
script changes them together on Redis Cluster too.

A change is a compare-and-set: the record is read, the rules every store shares
(``storage/schedule_edits.py``) decide the new record and its audit entry, and
``lua/schedule.lua`` applies both only if the record is still the one read; otherwise the
change is decided again on what is there now. The last tick is a sorted-set score written
with ``ZADD GT``: a late writer of an older tick never moves it back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from conveyor.errors import StorageError
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.schedule_edits import CHANGES_KEPT, ScheduleTxn, T
from conveyor.storage.schedule_records import WRITTEN, ScheduleChange, ScheduleInfo, written

#: Changes decided again at most this often when other writers keep changing the schedule.
ROUNDS = 50


def _record(info: ScheduleInfo) -> str:
    return json.dumps(dict(zip(WRITTEN, written(info), strict=True)))


def _info(raw: str, tick: Any) -> ScheduleInfo:
    fields = json.loads(raw)
    return ScheduleInfo(**fields, last_tick=None if tick is None else float(str(tick)))


class _Step:
    """One schedule's change as decided on the record read; ``lua/schedule.lua`` applies it."""

    def __init__(self, name: str, raw: str | None, tick: Any) -> None:
        self.name = name
        self.raw = raw or ""
        self.current = None if raw is None else _info(raw, tick)
        self.new = self.raw  # unchanged unless written or deleted
        self.change = ""

    def read(self) -> ScheduleInfo | None:
        return self.current

    def write(self, info: ScheduleInfo) -> None:
        self.new = _record(info)

    def delete(self) -> None:
        self.new = ""

    def note(self, change: ScheduleChange) -> None:
        self.change = json.dumps(change.to_wire())


class RedisSchedules:
    """The schedules on one Redis deployment: the steps ``ScheduleEdits`` runs its rules in,
    the ticks and the audit trail."""

    def __init__(self, ctx: RedisContext) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts

    def apply(self, name: str, rule: Callable[[ScheduleTxn], T]) -> T:
        """Run ``rule`` over schedule ``name`` as one compare-and-set, decided again while
        another writer changed it first (``ScheduleSteps``)."""
        keys = self.keys.schedules
        for _ in range(ROUNDS):
            raw, tick = self.link.call_many(("HGET", keys.records, name),
                                            ("ZSCORE", keys.ticks, name))
            step = _Step(name, raw, tick)
            result = rule(step)
            if step.new == step.raw and not step.change:
                return result  # nothing to write
            if self.scripts.run("schedule", keys, [self.ctx.now_arg(), name, step.raw, step.new,
                                                   step.change, CHANGES_KEPT]):
                return result
        raise StorageError(f"periodic schedule {name!r} kept changing under this change; "
                           "try again")

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record the newest enqueued tick (of a schedule still stored)."""
        keys = self.keys.schedules
        if self.link.call("HEXISTS", keys.records, name):
            self.link.call("ZADD", keys.ticks, "GT", repr(float(tick)), name)

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        keys = self.keys.schedules
        records, ticks = self.link.call_many(("HGETALL", keys.records),
                                             ("ZRANGE", keys.ticks, 0, -1, "WITHSCORES"))
        last = _pairs(ticks)
        return [_info(records[name], last.get(name)) for name in sorted(records)]

    def schedule_changes(self, name: str | None = None, limit: int = 50
                         ) -> list[ScheduleChange]:
        """The audit trail, newest first."""
        stop = limit - 1 if name is None else CHANGES_KEPT - 1
        raws: list[str] = self.link.call("LRANGE", self.keys.schedules.changes, 0, stop)
        changes = [ScheduleChange.from_wire(json.loads(raw)) for raw in raws]
        return [c for c in changes if name is None or c.name == name][:max(0, limit)]


def _pairs(reply: list[Any]) -> dict[str, Any]:
    """A WITHSCORES reply as a dict, whether the client paired it (RESP3) or not (RESP2)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return {str(pair[0]): pair[1] for pair in reply}
    return {str(k): v for k, v in zip(reply[::2], reply[1::2], strict=True)}
