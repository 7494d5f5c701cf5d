"""The memory backend's state, and the one place a job moves from state to state.

``MemoryState`` holds every index under one lock; ``_move`` keeps the per-state indexes, queue
counters, flow-control bookkeeping, batch counters and the event log in step, so the hot path
(``storage``) and the inspector (``inspect``) never update them by hand.
"""

from __future__ import annotations

import heapq
import secrets
import threading
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from conveyor.core.clock import Clock
from conveyor.core.job import (
    EnqueueResult,
    Event,
    EventKind,
    JobRecord,
    JobSpec,
    JobState,
    LeasedJob,
)
from conveyor.errors import ConveyorError
from conveyor.storage import aggregation, graph
from conveyor.storage.aggregation import Group, GroupId
from conveyor.storage.graph import JobView, NodeRow
from conveyor.storage.memory.batches import BatchBook
from conveyor.storage.memory.flow import FlowGate
from conveyor.storage.records import WorkerInfo, minute_of

#: States a job waits in before it runs (cancelled at once by a cancel request).
WAITING_STATES = frozenset({JobState.SCHEDULED, JobState.PENDING, JobState.RETRYING,
                            JobState.WAITING, JobState.AGGREGATING})
_DUE_STATES = (JobState.SCHEDULED, JobState.RETRYING)


@dataclass(slots=True, eq=False)
class Entry:
    """One stored job: its record plus what only the storage sees."""

    rec: JobRecord
    seq: int  # enqueue order, the tie-breaker of "oldest first"
    token: str | None = None
    version: int = 0  # bumped on every move; stale schedule-heap entries are skipped by it
    pending_since: float = 0.0
    band: int = 0  # its priority now: the declared one, raised by aging (storage/lineup.py)
    age_next: float = 0.0  # when aging raises it next (with ``flow.aging``)


@dataclass(slots=True)
class Totals:
    """All-time outcome counters of one (queue, job name)."""

    processed: int = 0
    failed: int = 0
    dead: int = 0
    retried: int = 0


class MemoryState:
    """Indexes of the memory backend and the moves between states (callers hold the lock)."""

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self._clock = clock
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._wakeups = 0
        self._waited = threading.local()  # per thread: _wakeups when its last wait timed out
        self._seq = 0
        self._jobs: dict[str, Entry] = {}
        self._pending: dict[str, dict[str, None]] = defaultdict(dict)
        self._due: list[tuple[float, int, int, str]] = []
        self._active: dict[str, None] = {}
        self._counts: dict[tuple[str, JobState], int] = defaultdict(int)
        self._queues: dict[str, None] = {}
        self._paused: set[str] = set()
        self._totals: dict[tuple[str, str], Totals] = {}
        # (queue, minute) -> [processed, failed, dead, retried], the last day (Inspector.history)
        self._minutes: dict[tuple[str, int], list[int]] = {}
        self._workers: dict[str, WorkerInfo] = {}
        self._commands: dict[str, str] = {}
        self._batches = BatchBook()
        self._flow = FlowGate(self._lookup)
        self._nodes: dict[str, NodeRow] = {}  # workflow nodes (storage/graph.py)
        self._marks: dict[str, None] = {}
        self._settling = False
        self._groups: dict[GroupId, Group] = {}  # aggregation groups (storage/aggregation.py)
        # their aggregating members, oldest first -> when each arrived
        self._members: dict[GroupId, dict[str, float]] = defaultdict(dict)
        # queue -> its pending jobs placed by the lineup walk (storage/lineup.py), and the
        # fair key served last there
        self._lined: dict[str, dict[str, None]] = defaultdict(dict)
        self._pointers: dict[str, str] = {}

    def now(self) -> float:
        """The storage's clock."""
        return self._clock.now()

    def _store(self, spec: JobSpec, now: float, *, wake: bool = True) -> EnqueueResult:
        if spec.id in self._jobs:
            return EnqueueResult(spec.id, created=False)
        folded = self._flow.fold_holder(spec.flow)
        if folded is not None and spec.flow is not None:
            self._fold(self._jobs[folded.id], spec)
            return EnqueueResult(folded.id, created=False)
        holder = self._flow.unique_holder(spec.flow, now)
        if holder is not None:
            return EnqueueResult(holder, created=False)
        scheduled = spec.run_at is not None and spec.run_at > now and not spec.waits
        state = (JobState.WAITING if spec.waits else
                 JobState.SCHEDULED if scheduled else JobState.PENDING)
        member = aggregation.arrival(spec.id, spec.queue, spec.name, spec.flow)
        if state is JobState.PENDING and member is not None and not self._joins([member], now):
            state = JobState.AGGREGATING
        if spec.node is not None:
            self._nodes[spec.id] = NodeRow(spec.id, spec.node, len(spec.node.parents))
        rec = JobRecord(
            id=spec.id, name=spec.name, queue=spec.queue, payload=spec.payload, state=state,
            max_retries=spec.max_retries, timeout=spec.timeout, deadline=spec.deadline,
            created_at=now, run_at=spec.run_at, batch_id=spec.batch_id, flow=spec.flow,
            events=[Event(ts=now, kind=EventKind.SCHEDULED if scheduled else EventKind.ENQUEUED,
                          state=state.value)],
        )
        self._seq += 1
        entry = Entry(rec, self._seq, pending_since=now)
        if spec.flow is not None:
            entry.band = spec.flow.priority
            # aging counts from when the job was first due
            entry.age_next = max(now, spec.run_at or now) + spec.flow.aging
        self._jobs[spec.id] = entry
        self._queues.setdefault(spec.queue)
        self._counts[(spec.queue, state)] += 1
        self._flow.joined(rec, entry.seq)
        if spec.batch_id:
            self._batches.joined(spec.batch_id, state)
        if scheduled:
            heapq.heappush(self._due, (now if spec.run_at is None else spec.run_at,
                                       entry.seq, entry.version, spec.id))
        elif state is JobState.AGGREGATING:
            self._members[_group_of(rec)][spec.id] = now
        elif state is JobState.WAITING:
            pass
        else:
            self._pending[spec.queue][spec.id] = None
            if spec.flow is not None and spec.flow.in_lineup:
                self._lined[spec.queue][spec.id] = None
            if wake:
                self._wake()
        return EnqueueResult(spec.id)

    def _holder(self, job_id: str, token: str) -> Entry | None:
        entry = self._jobs.get(job_id)
        if entry is None or entry.rec.state is not JobState.ACTIVE or entry.token != token:
            return None
        return entry

    def _lease(self, entry: Entry, worker_id: str, now: float, lease_seconds: float,
               token: str | None = None, lead: str | None = None) -> LeasedJob:
        rec = entry.rec
        rec.attempt += 1
        rec.worker = worker_id
        rec.started_at = now
        rec.lease_expires_at = now + lease_seconds
        entry.token = token or secrets.token_hex(12)
        self._move(entry, JobState.ACTIVE, EventKind.STARTED, now, worker=worker_id,
                   data=None if lead is None else {"lead": lead})
        return LeasedJob(
            id=rec.id, name=rec.name, queue=rec.queue, payload=rec.payload, token=entry.token,
            attempt=rec.attempt, errors=rec.errors, max_retries=rec.max_retries,
            timeout=rec.timeout, batch_id=rec.batch_id, recoveries=rec.recoveries,
            cost=rec.flow.cost if rec.flow is not None else 1,
        )

    def _joins(self, members: list[aggregation.Arrival], now: float) -> set[str]:
        """Join members to their groups; returns the ones that lead (stored pending)."""
        groups = {m.group: g for m in members if (g := self._groups.get(m.group)) is not None}
        leads = aggregation.join(groups, members, now)
        self._groups.update(groups)
        return leads

    def _fold(self, entry: Entry, spec: JobSpec) -> None:
        """A debounced or throttled call joins the scheduled job of its key: the newest
        arguments and (debounce) the later run time."""
        assert spec.flow is not None
        rec = entry.rec
        if spec.flow.fold_replaces:
            rec.payload = spec.payload
        if spec.flow.fold_moves and spec.run_at is not None and spec.run_at != rec.run_at:
            rec.run_at = spec.run_at
            entry.version += 1  # the heap's entry at the old time is stale now
            heapq.heappush(self._due, (spec.run_at, entry.seq, entry.version, rec.id))

    def _wake(self) -> None:
        self._wakeups += 1
        self._cond.notify_all()

    def _fire(self, callbacks: list[JobSpec], now: float) -> None:
        for spec in callbacks:
            try:
                if spec.batch_id:
                    self._batches.check_open(spec.batch_id)
            except ConveyorError:
                # The parent batch is gone or finished: run the callback on its own rather
                # than raise inside the acknowledgement that completed this batch.
                spec = replace(spec, batch_id=None)
            self._store(spec, now)

    def _end_unstarted(self, entry: Entry, kind: str, message: str, now: float) -> None:
        """A pending job that must never start (its deadline passed, a key breaks the key
        rule) → dead with ``message``, as ``dequeue`` and ``start`` end it."""
        entry.rec.message = message
        self._move(entry, JobState.DEAD, kind, now, message=message)

    # -- the one place jobs move -------------------------------------------------------------

    def _move(self, entry: Entry, new: JobState, kind: str, now: float, *,
              message: str | None = None, data: Mapping[str, Any] | None = None,
              worker: str | None = None) -> None:
        rec, old = entry.rec, entry.rec.state
        if old is JobState.PENDING:
            self._pending[rec.queue].pop(rec.id, None)
            self._lined[rec.queue].pop(rec.id, None)
        elif old is JobState.AGGREGATING:
            self._members[_group_of(rec)].pop(rec.id, None)
        elif old is JobState.ACTIVE:
            del self._active[rec.id]
            self._flow.stopped(rec)
            entry.token = None
            rec.lease_expires_at = None
            if rec.flow is not None:
                self._wake()  # a freed concurrency slot or order key may unblock a waiting job
        self._counts[(rec.queue, old)] -= 1
        self._counts[(rec.queue, new)] += 1
        rec.state = new
        entry.version += 1
        rec.finished_at = now if new.terminal else None
        if new is JobState.PENDING:
            rec.worker = None
            entry.pending_since = now
            self._pending[rec.queue][rec.id] = None
            if rec.flow is not None and rec.flow.in_lineup:
                self._lined[rec.queue][rec.id] = None
            self._wake()
        elif new is JobState.ACTIVE:
            self._active[rec.id] = None
            self._flow.started(rec, now)
        elif new is JobState.AGGREGATING:
            entry.pending_since = now
            self._members[_group_of(rec)][rec.id] = now
        elif new in _DUE_STATES:
            run_at = now if rec.run_at is None else rec.run_at
            heapq.heappush(self._due, (run_at, entry.seq, entry.version, rec.id))
        self._count_outcome(rec, new, now)
        self._event(rec, now, kind, message=message, data=data, worker=worker)
        if rec.batch_id:
            self._fire(self._batches.moved(rec.batch_id, old, new, now), now)
        if old.terminal != new.terminal and rec.id in self._nodes:
            self._mark(rec.id)

    @staticmethod
    def _event(rec: JobRecord, now: float, kind: str, *, message: str | None = None,
               data: Mapping[str, Any] | None = None, worker: str | None = None) -> None:
        assert rec.events is not None
        rec.events.append(Event(ts=now, kind=kind, state=rec.state.value, message=message,
                                worker=worker, attempt=rec.attempt, data=data))

    def _count_outcome(self, rec: JobRecord, new: JobState, now: float) -> None:
        if new is JobState.SUCCEEDED:
            self._totals_of(rec).processed += 1
            self._count_minute(rec.queue, now, 0)
        elif new in (JobState.FAILED, JobState.DEAD):
            totals = self._totals_of(rec)
            if new is JobState.FAILED:
                totals.failed += 1
            else:
                totals.dead += 1
            self._count_minute(rec.queue, now, 1 if new is JobState.FAILED else 2)

    def _count_minute(self, queue: str, now: float, column: int) -> None:
        """Add one outcome (its ``MinuteTotals`` column: processed, failed, dead, retried)."""
        row = self._minutes.setdefault((queue, minute_of(now)), [0, 0, 0, 0])
        row[column] += 1

    def _totals_of(self, rec: JobRecord) -> Totals:
        key = (rec.queue, rec.name)
        totals = self._totals.get(key)
        if totals is None:
            totals = self._totals[key] = Totals()
        return totals

    def _remove(self, entry: Entry, now: float, *, touch_batch: bool = True) -> None:
        rec = entry.rec
        del self._jobs[rec.id]
        if rec.state is JobState.PENDING:
            self._pending[rec.queue].pop(rec.id, None)
            self._lined[rec.queue].pop(rec.id, None)
        elif rec.state is JobState.AGGREGATING:
            self._members[_group_of(rec)].pop(rec.id, None)
        self._counts[(rec.queue, rec.state)] -= 1
        if touch_batch and rec.batch_id:
            self._fire(self._batches.left(rec.batch_id, rec.state, now), now)
        if rec.state.terminal:
            self._nodes.pop(rec.id, None)  # settled already: its children know its outcome
        elif rec.id in self._nodes:
            self._mark(rec.id)  # settles as cancelled: its children must not wait for it

    # -- workflows: the graph settles inside the move that marked it ---------------------------

    def _mark(self, job_id: str) -> None:
        self._marks[job_id] = None
        if not self._settling:
            self._settling = True
            try:
                graph.settle(_Graph(self))
            finally:
                self._settling = False

    def _graph(self) -> graph.GraphTxn:
        """The graph's reads and moves over this store (the caller holds the lock)."""
        return _Graph(self)

    def _attach(self, ids: Collection[str]) -> None:
        """Link nodes added at run time into their graph (``graph.attach``), settling what
        that moves in the same step."""
        self._settling = True
        try:
            graph.attach(_Graph(self), ids)
        finally:
            self._settling = False

    def _lookup(self, job_id: str) -> tuple[JobRecord, int] | None:
        entry = self._jobs.get(job_id)
        return None if entry is None else (entry.rec, entry.seq)


def _group_of(rec: JobRecord) -> GroupId:
    return (rec.queue, rec.name, rec.flow.group_key if rec.flow and rec.flow.group_key else "")


class _Graph:
    """``graph.GraphTxn`` over the memory backend (under its lock)."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state
        self._now = state.now()

    def take_marks(self) -> list[str]:
        marks = list(self._state._marks)
        self._state._marks.clear()
        return marks

    def nodes(self, ids: Collection[str]) -> dict[str, NodeRow]:
        found = self._state._nodes
        return {i: found[i] for i in ids if i in found}

    def jobs(self, ids: Collection[str]) -> dict[str, JobView]:
        out: dict[str, JobView] = {}
        for job_id in ids:
            entry = self._state._jobs.get(job_id)
            if entry is not None:
                rec = entry.rec
                halted = rec.batch_id is not None and self._state._batches.cancelled(rec.batch_id)
                out[job_id] = JobView(rec.state.value, rec.name, rec.message, rec.result,
                                      rec.payload, halted, rec.attempt)
        return out

    def save(self, rows: Iterable[NodeRow]) -> None:
        """Rows are the stored objects themselves: nothing to write."""

    def link(self, rows: Iterable[NodeRow]) -> None:
        """Rows are the stored objects themselves: nothing to write."""

    def release(self, job_id: str, payload: str | None, message: str) -> None:
        entry = self._state._jobs[job_id]
        if payload is not None:
            entry.rec.payload = payload
        self._state._move(entry, JobState.PENDING, EventKind.RELEASED, self._now,
                          message=message)

    def end(self, job_id: str, state: JobState, message: str) -> None:
        entry = self._state._jobs[job_id]
        entry.rec.message = message
        kind = EventKind.FAILED if state is JobState.FAILED else EventKind.CANCELLED
        self._state._move(entry, state, kind, self._now, message=message)

    def reopen(self, job_id: str, message: str) -> None:
        entry = self._state._jobs[job_id]
        entry.rec.message = None
        self._state._move(entry, JobState.WAITING, EventKind.REOPENED, self._now,
                          message=message)
