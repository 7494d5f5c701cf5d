"""Pending jobs missing from their queue's pending list are found and put back, in short steps.

On Redis a pending job lives in two places: its state entry says ``pending`` and an entry of
the queue's pending list names it. A job whose list entry is gone (an earlier version's
``dequeue.lua`` failing after its ``RPOP``, entries deleted by hand) is never run, and the
pending count (which is read from the list) does not show it. Nothing counts pending state
entries apart from the list, so no cheap check can tell when this happened: a pass runs over
each queue every ``every`` seconds, fleet-wide (the first worker to take the queue's repair
key runs it), advanced a few short steps per ``reclaim_expired`` call:

1. read the list's ids, ``LIST_CHUNK`` per ``LRANGE``, from the head (new jobs are pushed at
   the head, so an entry present for the whole walk is read at least once);
2. ``HSCAN`` the state hash, ``SCAN_COUNT`` per step; a job pending since before the pass
   began (less ``grace``) that the walk did not see is a candidate;
3. ``repair.lua`` puts each candidate back after re-checking it atomically: still pending,
   not parked by flow control, and with the same pending-since stamp (every script that
   pushes a job rewrites it, so an unchanged stamp means nobody pushed it since).

Each call touches at most ``LIST_CHUNK`` list entries or about ``SCAN_COUNT`` hash entries.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from conveyor.storage.redis import codec, records
from conveyor.storage.redis.batches import scan_reply
from conveyor.storage.redis.context import RedisContext

log = logging.getLogger("conveyor.storage.redis")

REPAIR_EVERY = 300.0  # seconds between two passes over one queue, whichever worker runs them
REPAIR_GRACE = 60.0  # a job pending for less than this at the start of a pass is left alone
LIST_CHUNK = 1000  # list entries per LRANGE
SCAN_COUNT = 200  # state entries per HSCAN step
STEP_BUDGET = 0.02  # seconds of steps per queue and reclaim_expired call
PT = codec.STATE_FIELDS.index("pending_since")  # its position in a state line, from 0


@dataclass(slots=True)
class _Pass:
    """One pass over one queue: the list walk, then the state scan."""

    since: float  # jobs pending since this storage time or later are left alone
    listed: set[str] = field(default_factory=set)
    index: int = 0  # the next LRANGE start
    cursor: str | None = None  # the HSCAN cursor; None while the list is walked


class PendingRepair:
    """The repair passes of one storage, a state machine per queue."""

    def __init__(self, ctx: RedisContext) -> None:
        self.ctx = ctx
        self.every = REPAIR_EVERY
        self.grace = REPAIR_GRACE
        self._passes: dict[str, _Pass] = {}
        self._next: dict[str, float] = {}  # monotonic time of the next try, per queue

    def advance(self, queue: str, budget: float = STEP_BUDGET) -> int:
        """Run steps of ``queue``'s pass for about ``budget`` seconds, starting one when it
        is due; returns how many jobs were put back."""
        if queue not in self._passes and not self._claim(queue):
            return 0
        deadline = time.monotonic() + budget
        put_back = 0
        while queue in self._passes:
            put_back += self.step(queue)
            if time.monotonic() >= deadline:
                break
        return put_back

    def _claim(self, queue: str) -> bool:
        """Start a pass if none ran on this queue (by any worker) in the last ``every``."""
        now = time.monotonic()
        if now < self._next.get(queue, 0.0):
            return False
        self._next[queue] = now + self.every
        ttl = max(1, int(self.every * 1000))
        if not self.ctx.link.call("SET", self.ctx.keys.queue(queue).repair, "1", "NX",
                                  "PX", ttl):
            return False
        self.start(queue)
        return True

    def start(self, queue: str) -> None:
        """Begin a pass over ``queue`` now (``advance`` does when one is due)."""
        self._passes[queue] = _Pass(since=self.ctx.now() - self.grace)

    def running(self, queue: str) -> bool:
        """Whether a pass over ``queue`` is under way."""
        return queue in self._passes

    def step(self, queue: str) -> int:
        """One bounded step of the pass (one ``LRANGE``, or one ``HSCAN`` and at most one
        ``repair.lua`` call); returns how many jobs it put back."""
        run = self._passes[queue]
        qk = self.ctx.keys.queue(queue)
        if run.cursor is None:
            ids = self.ctx.link.call("LRANGE", qk.pending, run.index,
                                     run.index + LIST_CHUNK - 1)
            run.listed.update(ids)
            run.index += len(ids)
            if len(ids) < LIST_CHUNK:
                run.cursor = "0"
            return 0
        cursor, entries = scan_reply(self.ctx.link.call(
            "HSCAN", qk.state, run.cursor, "COUNT", SCAN_COUNT))
        missing: list[str] = []
        for job_id, raw in entries:
            stamp = _stranded_stamp(raw, run.since)
            if stamp is not None and job_id not in run.listed:
                missing += [job_id, stamp]
        if cursor == "0":
            del self._passes[queue]
        else:
            run.cursor = cursor
        if not missing:
            return 0
        put_back = int(self.ctx.scripts.run(
            "repair", qk, [self.ctx.now_arg(), queue, *missing]))
        if put_back:
            self.ctx.ring(queue, put_back)
            log.warning("queue %s: put back %d pending job(s) missing from its list",
                        queue, put_back)
        return put_back


def _stranded_stamp(raw: str, since: float) -> str | None:
    """The pending-since field of a state entry that is pending since before ``since`` (or
    since an unreadable time: a damaged entry is put back too, and dequeue leases it alone
    to die with the reason); None for any other entry."""
    if not raw.startswith("pending\t"):
        return None
    fields = raw.partition("\n")[0].split("\t")
    stamp = fields[PT] if len(fields) > PT else ""
    when = records.pending_since(raw)
    if when is not None and when >= since:
        return None
    return stamp
