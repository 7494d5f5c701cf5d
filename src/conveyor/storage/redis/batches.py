"""Batches on Redis: membership, counters and callbacks (reading a batch: ``batch_pages``).

Jobs join their batch before they are stored (``enqueue_specs``), so a batch never completes
without them. Every script reports the batch jobs it moved, and ``sync_batches`` feeds those
moves to ``batch.lua``: idempotent per job, so a replay never counts a job twice, and the
callbacks that became due are enqueued (each with an id fixed at creation) before they are
marked fired.

The ids of a bulk enqueue join as runs (``id_runs``, ``lua/_runs.lua``): one entry per run
of ids that count up, not three per job, so a million jobs join for a few hundred entries
(docs/internals/redis-batches.md).
"""
from __future__ import annotations

import json
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from conveyor.core.job import ALL_STATES, EnqueueResult, JobSpec, JobState
from conveyor.core.text import printable
from conveyor.errors import BatchClosedError, BatchNotFound, WorkflowError
from conveyor.storage.records import JobBlock
from conveyor.storage.redis import codec
from conveyor.storage.redis.base import Move, RedisBase
from conveyor.storage.redis.codec import check_text
from conveyor.storage.redis.pipeline import Ready

log = logging.getLogger("conveyor.storage.redis")

ENQUEUE_CHUNK = 2000  # jobs per enqueue.lua call; scripts unpack at most 2,000 values
KIND_CACHE = 10_000  # batch kinds remembered per storage
STEP = 500  # jobs read per command when walking a batch, or indexed per batch.lua call
RUN_DIGITS = 12  # the counting part of an id in a run: its last 12 characters
RUN_MAX = 16**RUN_DIGITS - 1
MAX_RUNS = 8  # ids of a join that make more runs than this are sent one by one
JOIN_STATES = (JobState.PENDING, JobState.SCHEDULED)  # the only states runs hold
LOWER_HEX = re.compile(r"[0-9a-f]+")
_LOW = [f"{i:03x}" for i in range(4096)]


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
        nodes = [s for s in specs if s.node is not None]
        if nodes:  # a workflow's graph is stored before any of its jobs can move
            self._store_nodes(nodes)
        if len(specs) == 1 and not specs[0].batch_id:  # the one-by-one fast path
            spec = specs[0]
            qk = self.register_queue(spec.queue)
            if codec.plain(spec):
                code = self.scripts.run("enqueue_one", qk,
                                        [self.now_arg(), *codec.enqueue_one_args(spec)])
            else:
                code = self.scripts.run("enqueue", qk, [self.now_arg(), spec.queue, "each",
                                                        *codec.enqueue_args(spec)])[0]
            self.ring(spec.queue, int(code == "1"))
            return [result_of(spec.id, code)]
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
                    results[i] = result_of(specs[i].id, code)
                self.ring(queue, reply.count("1"))
                # Members stored aggregating joined their batch as pending: move them there.
                self.sync_batches([(str(specs[i].batch_id), specs[i].id, f"aggregating:{queue}")
                                   for i, code in zip(chunk, reply, strict=True)
                                   if code == "a" and specs[i].batch_id])
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
        found = id_runs(ids)
        if found is not None:
            flat = [value]
            for head, count in found:
                flat += [head, str(count)]
            status = self.batch_call(batch_id, "runs", flat)
            if status != "slow":  # "slow": not past the batch's last id, say; nothing written
                _check_joined(batch_id, status)
                return
        _check_joined(batch_id, self.batch_call(batch_id, "join", [value, "\n".join(ids)]))

    def _store_nodes(self, specs: Sequence[JobSpec]) -> None:
        """Write the graph entries of a workflow's jobs: "n:<id>" its node, "u:<id>" its
        parents not settled yet (``graph.lua``)."""
        by_workflow: dict[str, list[str]] = defaultdict(list)
        for spec in specs:
            if not spec.batch_id or spec.node is None:
                raise WorkflowError(f"workflow node {spec.id} names no workflow (batch id)")
            node = json.dumps(spec.node.to_wire(), separators=(",", ":"))
            by_workflow[spec.batch_id] += [f"n:{spec.id}", node,
                                           f"u:{spec.id}", str(len(spec.node.parents))]
        for workflow_id, flat in by_workflow.items():
            check_text("workflow id", workflow_id)
            key = self.keys.batch(workflow_id).graph
            for start in range(0, len(flat), 2000):
                self.link.call("HSET", key, *flat[start:start + 2000])

    def _join_batches(self, specs: Sequence[JobSpec]) -> None:
        now = self.now()
        pairs: dict[str, list[str]] = defaultdict(list)
        for spec in specs:
            state = ("waiting" if spec.waits else
                     "scheduled" if spec.run_at is not None and spec.run_at > now else "pending")
            pairs[str(spec.batch_id)] += [spec.id, f"{state}:{spec.queue}"]
        for batch_id, flat in pairs.items():
            _check_joined(batch_id, self.batch_call(batch_id, "add", flat))

    def _leave_batches(self, specs: Sequence[JobSpec]) -> None:
        """A unique job that was not created (its lock is held) does not join the batch."""
        self.sync_batches([(str(s.batch_id), s.id, f"deleted:{s.queue}") for s in specs])

    # -- counters: every transition's moves, fed to batch.lua ---------------------------

    def sync_batches(self, moves: Iterable[Move]) -> None:
        """Feed job state changes reported by a script to their batches' counters (and
        settle the workflows they marked: ``graph.py`` overrides this)."""
        self.sync_counts(moves)

    def sync_counts(self, moves: Iterable[Move]) -> set[str]:
        """Feed job state changes to their batches' counters; returns the workflows among
        them that hold marks to settle. A workflow is registered for the sweep before
        batch.lua can mark it, so a crash after the marks leaves it findable."""
        pairs: dict[str, list[str]] = defaultdict(list)
        for batch_id, job_id, value in moves:
            if not batch_id.isascii() and not _encodable(batch_id):
                # A damaged state entry names a batch no key can spell: that job alone loses
                # its batch bookkeeping, the jobs reported beside it keep theirs.
                log.warning("job %r names an unreadable batch id %r", job_id, batch_id)
                continue
            pairs[batch_id] += [job_id, value]
        marked: set[str] = set()
        for batch_id, flat in pairs.items():
            if self.is_workflow(batch_id):
                self.link.call("ZADD", self.keys.workflows_marked, "NX", self.now(), batch_id)
            if self.batch_run(batch_id, "set", flat)[1]:
                marked.add(batch_id)
        return marked

    def is_workflow(self, batch_id: str) -> bool:
        """Whether a batch holds a workflow (its kind never changes: cached)."""
        kind = self._kinds.get(batch_id)
        if kind is None:
            kind = self.link.call("HGET", self.keys.batch(batch_id).batch, "kind") or "batch"
            if len(self._kinds) >= KIND_CACHE:
                self._kinds.clear()
            self._kinds[batch_id] = kind
        return kind == "workflow"

    def batch_call(self, batch_id: str, mode: str, flat: list[str]) -> str:
        """Run batch.lua and enqueue any callback that became due; returns its status."""
        return self.batch_run(batch_id, mode, flat)[0]

    def batch_run(self, batch_id: str, mode: str, flat: list[str]) -> tuple[str, int]:
        """``batch_call``, also returning how many marks the workflow holds (0 for a batch)."""
        bk = self.keys.batch(batch_id)
        reply = self.scripts.run("batch", bk, [self.now_arg(), mode, *flat])
        status, due, notes = reply[:3]
        for note in notes:
            log.warning("batch %s: %s", printable(batch_id), printable(str(note)))
        for event, spec_json in due:
            self._fire(batch_id, event, spec_json)
        return str(status), int(reply[3]) if len(reply) > 3 else 0

    def _fire(self, batch_id: str, event: str, spec_json: str) -> None:
        # The callback's id is fixed when the batch is created, so a second enqueue after a
        # crash is a no-op; it is marked fired only once it is safely stored.
        spec = codec.spec_from_json(spec_json)
        self.enqueue_specs([spec])
        self.link.call("HSET", self.keys.batch(batch_id).batch, f"f:{event}", 1)
        log.info("batch %s: %s callback %s enqueued", batch_id, event, spec.id)


def id_runs(ids: Sequence[str]) -> list[tuple[str, int]] | None:
    """``ids`` as a few runs (first id, count) of ids that differ only in their last
    ``RUN_DIGITS`` characters, lowercase hex counting up by one (as ``new_ids`` makes them);
    None when they are not (``lua/_runs.lua`` keeps a run as one entry)."""
    if not ids:
        return None
    head, n = ids[0], len(ids)
    if len(head) > RUN_DIGITS and LOWER_HEX.fullmatch(head):
        prefix, start = head[:-RUN_DIGITS], int(head[-RUN_DIGITS:], 16)
        if start + n - 1 <= RUN_MAX and ids[-1] == f"{prefix}{start + n - 1:012x}" and (
                run_ids(prefix, start, n) == (ids if isinstance(ids, list) else list(ids))):
            return [(head, n)]  # the common case: one run, checked in one comparison
    runs: list[tuple[str, int]] = []
    follows = ""  # the id that would carry on the current run
    for job_id in ids:
        if job_id == follows:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        elif len(runs) == MAX_RUNS or len(job_id) <= RUN_DIGITS or not LOWER_HEX.fullmatch(job_id):
            return None
        else:
            runs.append((job_id, 1))
        count = int(job_id[-RUN_DIGITS:], 16) + 1
        follows = f"{job_id[:-RUN_DIGITS]}{count:012x}" if count <= RUN_MAX else ""
    return runs


def run_ids(prefix: str, start: int, n: int) -> list[str]:
    """The ids ``prefix`` + ``start``..``start + n - 1`` in 12 hex digits: one concatenation
    per id onto a table of the last three digits (formatting each costs four times more)."""
    out: list[str] = []
    at, end = start, start + n
    while at < end:
        stop = min(end, (at | 0xFFF) + 1)
        out += map(f"{prefix}{at >> 12:09x}".__add__, _LOW[at & 0xFFF:((stop - 1) & 0xFFF) + 1])
        at = stop
    return out


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


def result_of(job_id: str, code: str) -> EnqueueResult:
    """The ``EnqueueResult`` of one job from enqueue.lua's code for it."""
    if code in ("1", "a"):
        return EnqueueResult(job_id, True)
    if code.startswith("="):
        return EnqueueResult(code[1:], False)
    return EnqueueResult(job_id, False)
