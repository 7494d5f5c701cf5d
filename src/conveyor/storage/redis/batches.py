"""Batches on Redis: membership, counters and callbacks, and reading a batch page by page.

Jobs join their batch before they are stored (``enqueue_specs``), so a batch never completes
without them. Every script reports the batch jobs it moved, and ``sync_batches`` feeds those
moves to ``batch.lua``: idempotent per job, so a replay never counts a job twice, and the
callbacks that became due are enqueued (each with an id fixed at creation) before they are
marked fired.

batch.lua keeps two sorted sets beside the batch's ``jobs`` hash (see ``keys.BatchKeys``):
``order`` ranks every job by id (enqueue order) and ``states`` ranks them by state, then id.
A page is one ``ZRANGE`` by rank, and a count one ``ZCARD``/``ZCOUNT``: a render of a
200,000-job batch page costs the page, not four whole-hash reads (issue #14, item 12).
Whatever must see every job (cancel, or a filter by queue) walks in steps of ``STEP``.
A batch written by a version without these sets is read with ``HSCAN`` steps instead.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.job import ALL_STATES, EnqueueResult, JobSpec, JobState
from conveyor.storage.records import JobBlock
from conveyor.storage.redis import codec
from conveyor.storage.redis.base import Move, RedisBase
from conveyor.storage.redis.pipeline import Ready

log = logging.getLogger("conveyor.storage.redis")

ENQUEUE_CHUNK = 2000  # jobs per enqueue.lua call; scripts unpack at most 2,000 values
STEP = 500  # jobs read per command when walking a batch


def state_code(state: JobState) -> int:
    """The score of ``state`` in a batch's ``states`` set (batch.lua's STATE_CODE)."""
    return ALL_STATES.index(state) + 1


def scan_reply(reply: Any) -> tuple[str, list[tuple[str, str]]]:
    """``HSCAN``'s (cursor, pairs) from a raw reply (flat list) or a Cluster client's parsed
    one (a dict)."""
    cursor, found = reply
    pairs = list(found.items()) if isinstance(found, dict) else list(
        zip(found[::2], found[1::2], strict=True))
    return str(cursor), pairs


class RedisBatches(RedisBase):
    """Batch membership at enqueue, counters fed by every transition, and pages, counts and
    walks over one batch's jobs."""

    # -- enqueue: jobs join their batch first ---------------------------------------------

    def enqueue_specs(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs: batch membership first (so a batch never completes without them),
        then one enqueue.lua call per queue and chunk."""
        if len(specs) == 1 and not specs[0].batch_id:  # the one-by-one fast path
            spec = specs[0]
            reply = self.scripts.run("enqueue", self.register_queue(spec.queue),
                                     [self.now_arg(), spec.queue, "each",
                                      *codec.enqueue_args(spec)])
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
            qk = self.register_queue(queue)
            for start in range(0, len(idxs), ENQUEUE_CHUNK):
                chunk = idxs[start:start + ENQUEUE_CHUNK]
                args: list[str] = [self.now_arg(), queue, "each"]
                for i in chunk:
                    args.extend(codec.enqueue_args(specs[i]))
                reply = self.scripts.run("enqueue", qk, args)
                for i, code in zip(chunk, reply, strict=True):
                    results[i] = _result(specs[i].id, code)
                self.ring(queue, reply.count("1"))
        done = [r for r in results if r is not None]
        self._leave_batches(
            [s for s, r in zip(specs, done, strict=True) if s.batch_id and r.id != s.id])
        return done

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store a block: per chunk, batch membership first, then one enqueue.lua call in
        its "block" layout (the ids, then the static JSONs); see ``pipeline.Ready``."""
        return list(self.prepare_block(block).send().result())

    def prepare_block(self, block: JobBlock) -> Ready:
        """A block made ready to store (``SendsBlocks``): its call built, nothing written."""
        return Ready(self, block, ENQUEUE_CHUNK)

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

    # -- counters: every transition's moves, fed to batch.lua ---------------------------

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
        status, due = self.scripts.run("batch", bk, [self.now_arg(), mode, *flat])
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

    # -- pages ------------------------------------------------------------------------------

    def batch_members(self, batch_id: str) -> Iterator[list[tuple[str, str, str]]]:
        """Every job of a batch as (job id, state, queue), in steps of about ``STEP``
        (``HSCAN``: each job that stays in the batch is seen at least once)."""
        key = self.keys.batch(batch_id).jobs
        cursor = "0"
        while True:
            cursor, found = scan_reply(self.link.call("HSCAN", key, cursor, "COUNT", STEP))
            step = []
            for job_id, value in found:
                state, _, queue = value.partition(":")
                step.append((job_id, state, queue))
            yield step
            if cursor == "0":
                return

    def _indexed(self, batch_id: str) -> bool:
        bk = self.keys.batch(batch_id)
        return bool(self.link.call("ZCARD", bk.order)) or not self.link.call("HLEN", bk.jobs)

    def _band(self, batch_id: str, state: JobState | None) -> tuple[str, int, int]:
        """The set to read, and the first rank and size of the jobs in ``state`` there."""
        bk = self.keys.batch(batch_id)
        if state is None:
            return bk.order, 0, int(self.link.call("ZCARD", bk.order))
        code = state_code(state)
        start = int(self.link.call("ZCOUNT", bk.states, "-inf", f"({code}"))
        return bk.states, start, int(self.link.call("ZCOUNT", bk.states, code, code))

    def batch_page(self, batch_id: str, state: JobState | None, queue: str | None,
                   offset: int, limit: int) -> list[tuple[str, str]]:
        """(job id, queue) of the jobs ``offset``..``offset+limit`` of a batch in id order,
        as the batch knows their state and queue."""
        if not self._indexed(batch_id):
            return self._scanned_page(batch_id, state, queue, offset, limit)
        key, start, size = self._band(batch_id, state)
        jobs_key = self.keys.batch(batch_id).jobs
        out: list[tuple[str, str]] = []
        skip = offset if queue is not None else 0
        rank = start if queue is not None else start + offset
        while len(out) < limit and rank < start + size:
            want = limit - len(out) if queue is None else STEP
            ids = self.link.call("ZRANGE", key, rank, min(rank + want, start + size) - 1)
            if not ids:
                break
            rank += len(ids)
            values = self.link.call("HMGET", jobs_key, *ids)
            for job_id, value in zip(ids, values, strict=True):
                q = (value or "").partition(":")[2]
                if queue is not None and q != queue:
                    continue
                if skip:
                    skip -= 1
                elif len(out) < limit:
                    out.append((job_id, q))
        return out

    def batch_count(self, batch_id: str, state: JobState | None, queue: str | None) -> int:
        """How many jobs of a batch are in ``state`` (and ``queue``), as the batch knows."""
        if queue is None and self._indexed(batch_id):
            return self._band(batch_id, state)[2]
        return sum(1 for step in self.batch_members(batch_id) for _, s, q in step
                   if (state is None or s == state.value) and (queue is None or q == queue))

    def _scanned_page(self, batch_id: str, state: JobState | None, queue: str | None,
                      offset: int, limit: int) -> list[tuple[str, str]]:
        wanted = sorted((job_id, q) for step in self.batch_members(batch_id)
                        for job_id, s, q in step
                        if (queue is None or q == queue) and (state is None or s == state.value))
        return wanted[offset:offset + limit]


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
