"""Batches on Redis: membership, counters and callbacks (reading a batch: ``batch_pages``).

Jobs join their batch before they are stored (``enqueue.py``), so a batch never completes
without them. Every script reports the batch jobs it moved, and ``sync_counts`` feeds those
moves to ``batch.lua`` (called by ``RedisGraph.sync_batches``, which then settles the
workflows they marked): idempotent per job, so a replay never counts a job twice, and the
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
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from conveyor.core.job import (
    ALL_STATES,
    TERMINAL_STATES,
    BatchSpec,
    EnqueueResult,
    JobSpec,
    JobState,
)
from conveyor.core.text import printable
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.storage.redis import codec
from conveyor.storage.redis.context import Move, RedisContext

log = logging.getLogger("conveyor.storage.redis")

KIND_CACHE = 10_000  # batch kinds remembered per storage
STEP = 500  # jobs read per command when walking a batch, or indexed per batch.lua call
RUN_DIGITS = 12  # the counting part of an id in a run: its last 12 characters
RUN_MAX = 16**RUN_DIGITS - 1
MAX_RUNS = 8  # ids of a join that make more runs than this are sent one by one
JOIN_STATES = (JobState.PENDING, JobState.SCHEDULED)  # the only states runs hold
LOWER_HEX = re.compile(r"[0-9a-f]+")
CONFIRM_ROUNDS = 10  # reads back of a report (``confirm``); each one ends a job's race
_SETTLED = frozenset({*(s.value for s in TERMINAL_STATES), "deleted"})  # reports final
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


class RedisBatches:
    """Batches on one Redis deployment: creating and closing one, joining jobs to it, and
    its counters, fed the moves every script reports (``sync_counts``; the moves of a
    workflow's jobs also settle it: ``RedisGraph.sync_batches``). A callback that becomes due
    is enqueued with ``fire``, the storage's own enqueue."""

    def __init__(self, ctx: RedisContext,
                 fire: Callable[[Sequence[JobSpec]], list[EnqueueResult]]) -> None:
        self.ctx = ctx
        self.link, self.keys, self.scripts = ctx.link, ctx.keys, ctx.scripts
        self._fire_with = fire
        self._kinds: dict[str, str] = {}  # batch id -> kind ("batch" / "workflow")

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch with its callbacks stored for later."""
        if self.link.call("EXISTS", self.keys.batch(spec.id).batch):
            return  # creating an existing batch again changes nothing
        now = self.ctx.now()
        fields: list[object] = ["id", spec.id, "c", repr(now), "total", 0,
                                "meta", json.dumps(dict(spec.meta)), "kind", spec.kind]
        if spec.description is not None:
            fields += ["desc", spec.description]
        for event, cb in spec.callbacks.items():
            fields += [f"cb:{event}", codec.spec_to_json(cb)]
        self.link.call("HSET", self.keys.batch(spec.id).batch, *fields)
        self.link.call("ZADD", self.keys.batches, now, spec.id)

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch fully enqueued; it completes when every job is terminal."""
        if self.batch_call(batch_id, "close", []) == "missing":
            raise BatchNotFound(f"no batch {batch_id!r}")

    # -- enqueue: jobs join their batch first ---------------------------------------------

    def state_at(self, run_at: float | None, queue: str) -> str:
        """The batch value of a job joining now: "pending:<queue>" or "scheduled:<queue>"."""
        scheduled = run_at is not None and run_at > self.ctx.now()
        return f"{'scheduled' if scheduled else 'pending'}:{queue}"

    def join_batch(self, batch_id: str, value: str, ids: Sequence[str]) -> None:
        """Join ``ids`` (all ``value``: their state and queue) to a batch, as runs when they
        count up (``id_runs``), else one by one."""
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

    def join_batches(self, specs: Sequence[JobSpec]) -> None:
        """Join jobs to their batches before they are stored, so that a batch never
        completes without them."""
        now = self.ctx.now()
        pairs: dict[str, list[str]] = defaultdict(list)
        for spec in specs:
            state = ("waiting" if spec.waits else
                     "scheduled" if spec.run_at is not None and spec.run_at > now else "pending")
            pairs[str(spec.batch_id)] += [spec.id, f"{state}:{spec.queue}"]
        for batch_id, flat in pairs.items():
            _check_joined(batch_id, self.batch_call(batch_id, "add", flat))

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
                self.link.call("ZADD", self.keys.workflows_marked, "NX", self.ctx.now(), batch_id)
            if self.batch_run(batch_id, "set", flat)[1]:
                marked.add(batch_id)
        return marked

    def confirm(self, moves: Iterable[Move]) -> set[str]:
        """Report again each reported job whose state has moved on since its report was
        read, until the batch holds what the job holds; returns the workflows marked.

        A report is written after the script that read it, from whichever process ran it:
        the recoverer's "pending" or a refused ack's "active" can land after a worker that
        took the job since has reported it finished, and would stand for good (a batch that
        never completes). Reading the job back after writing, and writing again when it
        moved, ends with the batch at the job's state: whoever moves the job after our
        last read reports after that move. A terminal state never moves, so reports of one
        need no read; the hot path (a worker's own lease and outcome) reports nothing else.
        """
        marked: set[str] = set()
        due = [m for m in moves if m[2].partition(":")[0] not in _SETTLED]
        for _ in range(CONFIRM_ROUNDS):
            if not due:
                break
            by_queue: dict[str, list[Move]] = defaultdict(list)
            for move in due:
                by_queue[move[2].partition(":")[2]].append(move)
            moved: list[Move] = []
            for queue, reported in by_queue.items():
                now = {r.id: f"{r.state.value}:{r.queue}" for r in
                       self.ctx.records(queue, [job for _, job, _ in reported], False)}
                moved += [(batch, job, now[job]) for batch, job, value in reported
                          if job in now and now[job] != value]
            marked |= self.sync_counts(moved)
            due = [m for m in moved if m[2].partition(":")[0] not in _SETTLED]
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
        reply = self.scripts.run("batch", bk, [self.ctx.now_arg(), mode, *flat])
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
        self._fire_with([spec])
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
