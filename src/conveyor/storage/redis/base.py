"""The base every part of the Redis backend extends: connection, scripts, clock, queue
registry, enqueue, and the batch bookkeeping every transition feeds (shared helpers, not the
hot path, which is ``storage.py``)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from conveyor.clock import Clock
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.job import EnqueueResult, JobSpec
from conveyor.storage.records import JobBlock
from conveyor.storage.redis import codec
from conveyor.storage.redis.connection import Link, Settings
from conveyor.storage.redis.keys import Keys, QueueKeys
from conveyor.storage.redis.scripts import Scripts

log = logging.getLogger("conveyor.storage.redis")

ENQUEUE_CHUNK = 2000  # jobs per enqueue.lua call; scripts unpack at most 2,000 values
# Jobs per operator script call (cancel/requeue/kill/delete): a few milliseconds of Redis
# time each, so that workers and pings are served between the calls of a big operation.
ADMIN_CHUNK = 50
Move = Sequence[str]  # (batch id, job id, "state:queue") as the scripts report them


class RedisBase:
    """Connection, scripts and helpers; the inspector, schedules and ``RedisStorage`` add the
    protocol methods."""

    def __init__(self, settings: Settings, link: Link, clock: Clock | None) -> None:
        self.url = settings.url
        self.settings = settings
        self.link = link
        self.keys = Keys(settings.prefix)
        self.scripts = Scripts(link)
        self._clock = clock
        self._queues: set[str] = set()
        self._scan: dict[str, str] = {}  # reclaim's HSCAN cursor per queue
        self._keys_cache: dict[str, list[str]] = {}

    def __repr__(self) -> str:
        return f"<RedisStorage {self.link.where} prefix={self.settings.prefix!r}>"

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
        if name not in self._queues:
            codec.check_text("queue name", name)
            self.link.call("SADD", self.keys.queues, name)
            self._queues.add(name)
        return self.keys.queue(name)

    def _enqueue_keys(self, queue: str) -> list[str]:
        keys = self._keys_cache.get(queue)
        if keys is None:
            qk = self.register_queue(queue)
            keys = [qk.jobs, qk.state, qk.pending, qk.scheduled, qk.notify, qk.unique]
            self._keys_cache[queue] = keys
        return keys

    def ring(self, queue: str, ready: int) -> None:
        """On Cluster, wake workers waiting on ``queue`` (a single server's scripts push to
        the queue's own notify list instead)."""
        if self.settings.cluster and ready > 0:
            self.scripts.run("ring", [self.keys.doorbell(queue)], [self.now_arg(), ready])

    def known_queues(self) -> list[str]:
        """Every queue any client has enqueued to, sorted."""
        names = set(self.link.call("SMEMBERS", self.keys.queues))
        self._queues |= names
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

    # -- enqueue ------------------------------------------------------------------------

    def enqueue_specs(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs: batch membership first (so a batch never completes without them),
        then one enqueue.lua call per queue and chunk."""
        if len(specs) == 1 and not specs[0].batch_id:  # the one-by-one fast path
            spec = specs[0]
            reply = self.scripts.run(
                "enqueue", self._enqueue_keys(spec.queue),
                [self.now_arg(), spec.queue, "each", *codec.enqueue_args(spec)])
            self.ring(spec.queue, int(reply[0] == "1"))
            return [_result(spec.id, reply[0])]
        batched = [s for s in specs if s.batch_id]
        if batched:
            self._join_batches(batched)
        results: list[EnqueueResult | None] = [None] * len(specs)
        groups: dict[str, list[int]] = defaultdict(list)
        for i, spec in enumerate(specs):
            groups[spec.queue].append(i)
        for queue, idxs in groups.items():
            keys = self._enqueue_keys(queue)
            for start in range(0, len(idxs), ENQUEUE_CHUNK):
                chunk = idxs[start:start + ENQUEUE_CHUNK]
                args: list[str] = [self.now_arg(), queue, "each"]
                for i in chunk:
                    args.extend(codec.enqueue_args(specs[i]))
                reply = self.scripts.run("enqueue", keys, args)
                for i, code in zip(chunk, reply, strict=True):
                    results[i] = _result(specs[i].id, code)
                self.ring(queue, reply.count("1"))
        done = [r for r in results if r is not None]
        self._leave_batches(
            [s for s, r in zip(specs, done, strict=True) if s.batch_id and r.id != s.id])
        return done

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store a block: per chunk, batch membership first, then one enqueue.lua call in its
        "block" layout (ids and static JSONs sent as two joined strings). A block with flow
        control, or with ids that cannot be joined, is stored spec by spec instead."""
        if (block.flows is not None and any(block.flows)) or not codec.joinable(block.ids):
            return self.enqueue_specs(block.specs())
        keys = self._enqueue_keys(block.queue)
        shared = codec.block_args(block)
        statics = codec.block_statics(block)
        joins = self._state_at(block.run_at, block.queue) if block.batch_id else ""
        results: list[EnqueueResult] = []
        for start in range(0, len(block), ENQUEUE_CHUNK):
            ids = block.ids[start:start + ENQUEUE_CHUNK]
            if block.batch_id:
                self._join_batch(block.batch_id, joins, ids)
            reply = self.scripts.run("enqueue", keys, [
                self.now_arg(), block.queue, "block", *shared, "\n".join(ids),
                "\n".join(statics[start:start + ENQUEUE_CHUNK])])
            results += [_result(job_id, code) for job_id, code in zip(ids, reply, strict=True)]
            self.ring(block.queue, reply.count("1"))
        return results

    def _state_at(self, run_at: float | None, queue: str) -> str:
        """The batch value of a job joining now: "pending:<queue>" or "scheduled:<queue>"."""
        return f"{'scheduled' if run_at is not None and run_at > self.now() else 'pending'}:{queue}"

    def _join_batch(self, batch_id: str, value: str, ids: Sequence[str]) -> None:
        _check_joined(batch_id, self.batch_call(batch_id, "join", [value, "\n".join(ids)]))

    def _join_batches(self, specs: Sequence[JobSpec]) -> None:
        now = self.now()
        pairs: dict[str, list[str]] = defaultdict(list)
        for spec in specs:
            state = "scheduled" if spec.run_at is not None and spec.run_at > now else "pending"
            pairs[str(spec.batch_id)] += [spec.id, f"{state}:{spec.queue}"]
        for batch_id, flat in pairs.items():
            _check_joined(batch_id, self.batch_call(batch_id, "add", flat))

    def _leave_batches(self, specs: Sequence[JobSpec]) -> None:
        """A unique job that was not created (its lock is held) does not join the batch."""
        self.sync_batches([(str(s.batch_id), s.id, f"deleted:{s.queue}") for s in specs])

    # -- batches ------------------------------------------------------------------------

    def sync_batches(self, moves: Iterable[Move]) -> None:
        """Feed job state changes reported by a script to their batches' counters."""
        pairs: dict[str, list[str]] = defaultdict(list)
        for batch_id, job_id, value in moves:
            if not batch_id.isascii() and not _encodable(batch_id):
                # A damaged state entry names a batch no key can spell: that job alone loses
                # its batch bookkeeping, the jobs reported beside it keep theirs.
                log.warning("job %r names an unreadable batch id %r", job_id, batch_id)
                continue
            pairs[batch_id] += [job_id, value]
        for batch_id, flat in pairs.items():
            self.batch_call(batch_id, "set", flat)

    def batch_call(self, batch_id: str, mode: str, flat: list[str]) -> str:
        """Run batch.lua and enqueue any callback that became due; returns its status."""
        bk = self.keys.batch(batch_id)
        status, due = self.scripts.run("batch", bk.all(),
                                       [self.now_arg(), mode, *flat])
        for event, spec_json in due:
            self._fire(batch_id, event, spec_json)
        return str(status)

    def _fire(self, batch_id: str, event: str, spec_json: str) -> None:
        # The callback's id is fixed when the batch is created, so a second enqueue after a
        # crash is a no-op; it is marked fired only once it is safely stored.
        spec = codec.spec_from_json(spec_json)
        self.enqueue_specs([spec])
        self.link.call("HSET", self.keys.batch(batch_id).batch, f"f:{event}", 1)
        log.info("batch %s: %s callback %s enqueued", batch_id, event, spec.id)

    def run_each(self, name: str, by_queue: dict[str, list[str]]) -> list[Any]:
        """Run an admin script (cancel/requeue/kill/delete) per queue; returns each reply's
        first element and feeds the batch moves on."""
        replies = []
        for queue, ids in by_queue.items():
            for start in range(0, len(ids), ADMIN_CHUNK):
                first, moves = self.scripts.run(
                    name, self.keys.queue(queue).admin(),
                    [self.now_arg(), queue, *ids[start:start + ADMIN_CHUNK]])
                self.sync_batches(moves)
                if name == "requeue":
                    self.ring(queue, int(first))
                replies.append(first)
        return replies


def _check_joined(batch_id: str, status: str) -> None:
    if status == "missing":
        raise BatchNotFound(f"no batch {batch_id!r}")
    if status == "finished":
        raise BatchClosedError(f"batch {batch_id!r} has already finished")


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _result(job_id: str, code: str) -> EnqueueResult:
    if code == "1":
        return EnqueueResult(job_id, True)
    if code.startswith("="):
        return EnqueueResult(code[1:], False)
    return EnqueueResult(job_id, False)
