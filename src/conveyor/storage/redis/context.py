"""What every part of the Redis backend shares: the connection, the scripts, the key names,
the clock and the queue registry, with the reads several parts make (a job's queue, its
records and heads). ``RedisStorage`` makes one ``RedisContext`` and hands it to each part
it is made of (``storage.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from conveyor.core.clock import Clock
from conveyor.core.job import JobRecord
from conveyor.storage.job_heads import JobHead
from conveyor.storage.redis import codec, records
from conveyor.storage.redis.connection import Link, Settings
from conveyor.storage.redis.heads import WIDTH, head_of
from conveyor.storage.redis.keys import DoorbellKeys, Keys, QueueKeys
from conveyor.storage.redis.scripts import Scripts

# Jobs per heads.lua call: each copies its jobs' entries in Redis before cutting them, so a
# call stays short whatever the jobs hold, and other clients are served between calls.
HEADS_CHUNK = 50
Move = Sequence[str]  # (batch id, job id, "state:queue") as the scripts report them


class RedisContext:
    """One Redis deployment as a storage's parts use it: ``link`` (connections), ``scripts``
    (the Lua scripts), ``keys`` (every key name), the clock, and the queues seen."""

    def __init__(self, settings: Settings, link: Link, clock: Clock | None) -> None:
        self.settings = settings
        self.link = link
        self.keys = Keys(settings.prefix)
        self.scripts = Scripts(link)
        self._clock = clock
        self.registered: set[str] = set()  # the queues this process registered or read

    # -- time ---------------------------------------------------------------------------

    def now(self) -> float:
        """The storage clock: Redis ``TIME``, or the explicit clock given at open (tests)."""
        if self._clock is not None:
            return self._clock.now()
        sec, usec = self.link.call("TIME")
        return int(sec) + int(usec) / 1e6

    def now_arg(self) -> str:
        """ARGV[1] of every script: '' tells the script to read the server's ``TIME``."""
        return "" if self._clock is None else repr(self._clock.now())

    # -- queues -------------------------------------------------------------------------

    def register_queue(self, name: str) -> QueueKeys:
        """The queue's keys, recording the queue in the registry the first time we see it."""
        if name not in self.registered:
            codec.check_text("queue name", name)
            self.link.call("SADD", self.keys.queues, name)
            self.registered.add(name)
        return self.keys.queue(name)

    def ring(self, queue: str, ready: int) -> None:
        """On Cluster, wake workers waiting on ``queue`` (a single server's scripts push to
        the queue's own notify list instead)."""
        if self.settings.cluster and ready > 0:
            self.scripts.run("ring", DoorbellKeys(self.keys.doorbell(queue)),
                             [self.now_arg(), ready])

    def known_queues(self) -> list[str]:
        """Every queue any client has enqueued to, sorted."""
        names = set(self.link.call("SMEMBERS", self.keys.queues))
        self.registered |= names
        return sorted(names)

    def find_queue(self, job_id: str, token: str | None = None) -> str | None:
        """The queue holding a job: from its lease token when given, else by looking."""
        if token:
            _, sep, queue = token.partition("/")
            if sep:
                return queue
        found = self.group_by_queue([job_id])
        return next(iter(found), None)

    def group_by_queue(self, job_ids: Iterable[str]) -> dict[str, list[str]]:
        """Job ids grouped by the queue that holds them (one HMGET per queue); unknown ids
        are left out."""
        left = list(dict.fromkeys(job_ids))
        groups: dict[str, list[str]] = {}
        # A job is found by its static record, or else by its state entry alone (the other
        # half lost to damage), so that operators can still see and delete it.
        for part in ("jobs", "state"):
            for queue in self.known_queues():
                if not left:
                    return groups
                found = self.link.call("HMGET", getattr(self.keys.queue(queue), part), *left)
                here = [job_id for job_id, hit in zip(left, found, strict=True) if hit]
                if here:
                    groups.setdefault(queue, []).extend(here)
                    left = [job_id for job_id, hit in zip(left, found, strict=True) if not hit]
        return groups

    def records(self, queue: str, ids: Sequence[str], with_events: bool) -> list[JobRecord]:
        """The stored jobs of ``ids`` in ``queue``, in order (an unknown id is left out; half
        a job is shown, unreadable, not hidden)."""
        if not ids:
            return []
        qk = self.keys.queue(queue)
        statics, states, results, messages = self.link.call_many(  # one round trip
            ("HMGET", qk.jobs, *ids), ("HMGET", qk.state, *ids),
            ("HMGET", qk.results, *ids), ("HMGET", qk.messages, *ids))
        return [records.to_record(i, static, state, result, message, with_events)
                for i, static, state, result, message
                in zip(ids, statics, states, results, messages, strict=True)
                if static or state]

    def heads(self, queue: str, ids: Sequence[str], chars: int) -> list[JobHead]:
        """What a search reads of the jobs of ``ids`` in ``queue`` (``lua/heads.lua``), in
        order; an unknown id is left out."""
        out: list[JobHead] = []
        qk = self.keys.queue(queue)
        for start in range(0, len(ids), HEADS_CHUNK):
            chunk = ids[start:start + HEADS_CHUNK]
            replies = self.scripts.run("heads", qk, [self.now_arg(), WIDTH * chars, *chunk])
            out += [head_of(job_id, queue, payload, state, message, chars)
                    for job_id, (payload, state, message) in zip(chunk, replies, strict=True)
                    if state or payload]
        return out
