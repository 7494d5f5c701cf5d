"""The memory backend's state, and the one place a job moves from state to state.

``MemoryState`` holds every index under one lock; ``move`` keeps the per-state indexes, queue
counters, flow-control bookkeeping, batch counters and the event log in step, so the hot path
(``storage``) and the other parts (``inspect``, ``groups``, ``outbox``), each handed this one
state when made, never update them by hand.
"""

from __future__ import annotations

import heapq
import secrets
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
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
from conveyor.storage.lineup import first_aging
from conveyor.storage.memory.batches import BatchBook
from conveyor.storage.memory.entry import DUE_STATES, WAITING_STATES, Entry, group_of
from conveyor.storage.memory.flow import FlowGate
from conveyor.storage.memory.totals import Totals
from conveyor.storage.rules import CANCELLED_WHILE_WAITING, cancelled_message
from conveyor.storage.workers import WorkerInfo


class MemoryState:
    """Indexes of the memory backend and the moves between states (callers hold the lock)."""

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.clock = clock
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.wakeups = 0
        self.waited = threading.local()  # per thread: _wakeups when its last wait timed out
        self.seq = 0
        self.jobs: dict[str, Entry] = {}
        self.pending: dict[str, dict[str, None]] = defaultdict(dict)
        self.due: list[tuple[float, int, int, str]] = []
        self.active: dict[str, None] = {}
        self.counts: dict[tuple[str, JobState], int] = defaultdict(int)
        self.queues: dict[str, None] = {}
        self.paused: set[str] = set()
        self.totals = Totals()
        self.workers: dict[str, WorkerInfo] = {}
        self.commands: dict[str, str] = {}
        self.batches = BatchBook()
        self.flow = FlowGate(self.lookup)
        self.nodes: dict[str, NodeRow] = {}  # workflow nodes (storage/graph.py)
        self.marks: dict[str, None] = {}
        self.settling = False
        self.groups: dict[GroupId, Group] = {}  # aggregation groups (storage/aggregation.py)
        # their aggregating members, oldest first -> when each arrived
        self.members: dict[GroupId, dict[str, float]] = defaultdict(dict)
        # queue -> its pending jobs the lineup places (storage/lineup.py); its last fair key
        self.lined: dict[str, dict[str, None]] = defaultdict(dict)
        self.pointers: dict[str, str] = {}
        self.forgets: list[Callable[[str], None]] = []  # called with a deleted job's id

    def now(self) -> float:
        """The storage's clock."""
        return self.clock.now()

    def store(self, spec: JobSpec, now: float, *, wake: bool = True) -> EnqueueResult:
        """Store one job (folded, held by its unique key, or new); ``wake``: wake waiters."""
        if spec.id in self.jobs:
            return EnqueueResult(spec.id, created=False)
        folded = self.flow.fold_holder(spec.flow)
        if folded is not None and spec.flow is not None:
            self.fold(self.jobs[folded.id], spec)
            return EnqueueResult(folded.id, created=False)
        holder = self.flow.unique_holder(spec.flow, now)
        if holder is not None:
            return EnqueueResult(holder, created=False)
        scheduled = spec.run_at is not None and spec.run_at > now and not spec.waits
        state = (JobState.WAITING if spec.waits else
                 JobState.SCHEDULED if scheduled else JobState.PENDING)
        member = aggregation.arrival(spec.id, spec.queue, spec.name, spec.flow)
        if state is JobState.PENDING and member is not None and not self.joins([member], now):
            state = JobState.AGGREGATING
        if spec.node is not None:
            self.nodes[spec.id] = NodeRow(spec.id, spec.node, len(spec.node.parents))
        rec = JobRecord(
            id=spec.id, name=spec.name, queue=spec.queue, payload=spec.payload, state=state,
            max_retries=spec.max_retries, timeout=spec.timeout, deadline=spec.deadline,
            created_at=now, run_at=spec.run_at, batch_id=spec.batch_id, flow=spec.flow,
            events=[Event(ts=now, kind=EventKind.SCHEDULED if scheduled else EventKind.ENQUEUED,
                          state=state.value)],
        )
        self.seq += 1
        entry = Entry(rec, self.seq, pending_since=now)
        if spec.flow is not None:
            entry.band = spec.flow.priority
            entry.age_next = first_aging(spec.flow.aging, spec.run_at, now) or 0.0
        self.jobs[spec.id] = entry
        self.queues.setdefault(spec.queue)
        self.counts[(spec.queue, state)] += 1
        self.flow.joined(rec, entry.seq)
        if spec.batch_id:
            self.batches.joined(spec.batch_id, state)
        if scheduled:
            heapq.heappush(self.due, (now if spec.run_at is None else spec.run_at,
                                      entry.seq, entry.version, spec.id))
        elif state is JobState.AGGREGATING:
            self.members[group_of(rec)][spec.id] = now
        elif state is JobState.WAITING:
            pass
        else:
            self.pending[spec.queue][spec.id] = None
            if spec.flow is not None and spec.flow.in_lineup:
                self.lined[spec.queue][spec.id] = None
            if wake:
                self.wake()
        return EnqueueResult(spec.id)

    def holder(self, job_id: str, token: str) -> Entry | None:
        """The active job ``job_id`` if ``token`` is its lease (the fence), else None."""
        entry = self.jobs.get(job_id)
        if entry is None or entry.rec.state is not JobState.ACTIVE or entry.token != token:
            return None
        return entry

    def lease(self, entry: Entry, worker_id: str, now: float, lease_seconds: float,
              token: str | None = None, lead: str | None = None) -> LeasedJob:
        rec = entry.rec
        rec.attempt += 1
        rec.worker = worker_id
        rec.started_at = now
        rec.lease_expires_at = now + lease_seconds
        entry.token = token or secrets.token_hex(12)
        self.move(entry, JobState.ACTIVE, EventKind.STARTED, now, worker=worker_id,
                  data=None if lead is None else {"lead": lead})
        return LeasedJob(
            id=rec.id, name=rec.name, queue=rec.queue, payload=rec.payload, token=entry.token,
            attempt=rec.attempt, errors=rec.errors, max_retries=rec.max_retries,
            timeout=rec.timeout, batch_id=rec.batch_id, recoveries=rec.recoveries,
            cost=rec.flow.cost if rec.flow is not None else 1,
        )

    def joins(self, members: list[aggregation.Arrival], now: float) -> set[str]:
        """Join members to their groups; returns the ones that lead (stored pending)."""
        groups = {m.group: g for m in members if (g := self.groups.get(m.group)) is not None}
        leads = aggregation.join(groups, members, now)
        self.groups.update(groups)
        return leads

    def fold(self, entry: Entry, spec: JobSpec) -> None:
        """A debounced or throttled call joins the scheduled job of its key: the newest
        arguments and (debounce) the later run time."""
        assert spec.flow is not None
        rec = entry.rec
        if spec.flow.fold_replaces:
            rec.payload = spec.payload
        if spec.flow.fold_moves and spec.run_at is not None and spec.run_at != rec.run_at:
            rec.run_at = spec.run_at
            entry.version += 1  # the heap's entry at the old time is stale now
            heapq.heappush(self.due, (spec.run_at, entry.seq, entry.version, rec.id))

    def wake(self) -> None:
        """Wake every waiting ``wait`` (new work may be ready)."""
        self.wakeups += 1
        self.cond.notify_all()

    def fire(self, callbacks: list[JobSpec], now: float) -> None:
        """Enqueue batch callbacks that became due."""
        for spec in callbacks:
            try:
                if spec.batch_id:
                    self.batches.check_open(spec.batch_id)
            except ConveyorError:
                # The parent batch is gone or finished: run the callback on its own rather
                # than raise inside the acknowledgement that completed this batch.
                spec = replace(spec, batch_id=None)
            self.store(spec, now)

    def end_unstarted(self, entry: Entry, kind: str, message: str, now: float) -> None:
        """A pending job that must never start (its deadline passed, a key breaks the key
        rule) → dead with ``message``, as ``dequeue`` and ``start`` end it."""
        entry.rec.message = message
        self.move(entry, JobState.DEAD, kind, now, message=message)

    # -- the one place jobs move -------------------------------------------------------------

    def move(self, entry: Entry, new: JobState, kind: str, now: float, *,
             message: str | None = None, data: Mapping[str, Any] | None = None,
             worker: str | None = None) -> None:
        """Move a job to ``new``, keeping every index, counter and its event log in step."""
        rec, old = entry.rec, entry.rec.state
        if old is JobState.PENDING:
            self.pending[rec.queue].pop(rec.id, None)
            self.lined[rec.queue].pop(rec.id, None)
        elif old is JobState.AGGREGATING:
            self.members[group_of(rec)].pop(rec.id, None)
        elif old is JobState.ACTIVE:
            del self.active[rec.id]
            self.flow.stopped(rec)
            entry.token = None
            rec.lease_expires_at = None
            if rec.flow is not None:
                self.wake()  # a freed concurrency slot or order key may unblock a waiting job
        self.counts[(rec.queue, old)] -= 1
        self.counts[(rec.queue, new)] += 1
        rec.state = new
        entry.version += 1
        rec.finished_at = now if new.terminal else None
        if new is JobState.PENDING:
            rec.worker = None
            entry.pending_since = now
            self.pending[rec.queue][rec.id] = None
            if rec.flow is not None and rec.flow.in_lineup:
                self.lined[rec.queue][rec.id] = None
            self.wake()
        elif new is JobState.ACTIVE:
            self.active[rec.id] = None
            self.flow.started(rec, now)
        elif new is JobState.AGGREGATING:
            entry.pending_since = now
            self.members[group_of(rec)][rec.id] = now
        elif new in DUE_STATES:
            run_at = now if rec.run_at is None else rec.run_at
            heapq.heappush(self.due, (run_at, entry.seq, entry.version, rec.id))
        self.totals.moved(rec, new, now)
        self.event(rec, now, kind, message=message, data=data, worker=worker)
        if rec.batch_id:
            self.fire(self.batches.moved(rec.batch_id, old, new, now), now)
        if old.terminal != new.terminal and rec.id in self.nodes:
            self.mark(rec.id)

    @staticmethod
    def event(rec: JobRecord, now: float, kind: str, *, message: str | None = None,
              data: Mapping[str, Any] | None = None, worker: str | None = None) -> None:
        """Append an event to ``rec``'s log (a move appends its own)."""
        assert rec.events is not None
        rec.events.append(Event(ts=now, kind=kind, state=rec.state.value, message=message,
                                worker=worker, attempt=rec.attempt, data=data))

    def recover(self, entries: list[Entry], max_recoveries: int, now: float, why: str) -> None:
        """Jobs whose lease was lost (expired, their worker died, redelivered) → pending, or
        dead past ``max_recoveries``, or cancelled when a cancel was asked for."""
        for entry in entries:
            rec = entry.rec
            rec.recoveries += 1
            if rec.cancel_requested:  # the lost attempt ends the job, as an error would
                rec.message = cancelled_message(why)
                self.move(entry, JobState.CANCELLED, EventKind.CANCELLED, now,
                          worker=rec.worker, message=rec.message)
            elif rec.recoveries > max_recoveries:
                rec.message = f"recovered {rec.recoveries} times (poison job?)"
                self.move(entry, JobState.DEAD, EventKind.DEAD, now, worker=rec.worker,
                          message=rec.message)
            else:
                self.move(entry, JobState.PENDING, EventKind.RECOVERED, now,
                          worker=rec.worker, message=f"{why}; put back to pending")

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one (``Storage.cancel``)."""
        with self.lock:
            entry = self.jobs.get(job_id)
            if entry is None:
                return None
            rec = entry.rec
            now = self.now()
            if rec.state in WAITING_STATES:
                rec.message = CANCELLED_WHILE_WAITING
                self.move(entry, JobState.CANCELLED, EventKind.CANCELLED, now,
                          message=rec.message)
            elif rec.state is JobState.ACTIVE and not rec.cancel_requested:
                rec.cancel_requested = True
                self.event(rec, now, EventKind.CANCEL_REQUESTED, worker=rec.worker)
            return rec.state

    def remove(self, entry: Entry, now: float, *, touch_batch: bool = True) -> None:
        """Delete a job from every index (``touch_batch``: and from its batch's counters)."""
        rec = entry.rec
        del self.jobs[rec.id]
        for forget in self.forgets:
            forget(rec.id)
        if rec.state is JobState.PENDING:
            self.pending[rec.queue].pop(rec.id, None)
            self.lined[rec.queue].pop(rec.id, None)
        elif rec.state is JobState.AGGREGATING:
            self.members[group_of(rec)].pop(rec.id, None)
        self.counts[(rec.queue, rec.state)] -= 1
        if touch_batch and rec.batch_id:
            self.fire(self.batches.left(rec.batch_id, rec.state, now), now)
        if rec.state.terminal:
            self.nodes.pop(rec.id, None)  # settled already: its children know its outcome
        elif rec.id in self.nodes:
            self.mark(rec.id)  # settles as cancelled: its children must not wait for it

    # -- workflows: the graph settles inside the move that marked it ---------------------------

    def mark(self, job_id: str) -> None:
        """A workflow node entered or left a terminal state: settle its graph now."""
        self.marks[job_id] = None
        if not self.settling:
            self.settling = True
            try:
                graph.settle(_Graph(self))
            finally:
                self.settling = False

    def graph_txn(self) -> graph.GraphTxn:
        """The graph's reads and moves over this store (the caller holds the lock)."""
        return _Graph(self)

    def attach(self, ids: Collection[str]) -> None:
        """Link nodes added at run time into their graph (``graph.attach``), settling what
        that moves in the same step."""
        self.settling = True
        try:
            graph.attach(_Graph(self), ids)
        finally:
            self.settling = False

    def lookup(self, job_id: str) -> tuple[JobRecord, int] | None:
        """A job's record and enqueue order (the flow gate's view of the store)."""
        entry = self.jobs.get(job_id)
        return None if entry is None else (entry.rec, entry.seq)


class _Graph:
    """``graph.GraphTxn`` over the memory backend (under its lock)."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state
        self._now = state.now()

    def take_marks(self) -> list[str]:
        marks = list(self._state.marks)
        self._state.marks.clear()
        return marks

    def nodes(self, ids: Collection[str]) -> dict[str, NodeRow]:
        found = self._state.nodes
        return {i: found[i] for i in ids if i in found}

    def jobs(self, ids: Collection[str]) -> dict[str, JobView]:
        out: dict[str, JobView] = {}
        for job_id in ids:
            entry = self._state.jobs.get(job_id)
            if entry is not None:
                rec = entry.rec
                halted = rec.batch_id is not None and self._state.batches.cancelled(rec.batch_id)
                out[job_id] = JobView(rec.state.value, rec.name, rec.message, rec.result,
                                      rec.payload, halted, rec.attempt)
        return out

    def save(self, rows: Iterable[NodeRow]) -> None:
        """Rows are the stored objects themselves: nothing to write."""

    def link(self, rows: Iterable[NodeRow]) -> None:
        """Rows are the stored objects themselves: nothing to write."""

    def release(self, job_id: str, payload: str | None, message: str) -> None:
        entry = self._state.jobs[job_id]
        if payload is not None:
            entry.rec.payload = payload
        self._state.move(entry, JobState.PENDING, EventKind.RELEASED, self._now,
                         message=message)

    def end(self, job_id: str, state: JobState, message: str) -> None:
        entry = self._state.jobs[job_id]
        entry.rec.message = message
        kind = EventKind.FAILED if state is JobState.FAILED else EventKind.CANCELLED
        self._state.move(entry, state, kind, self._now, message=message)

    def reopen(self, job_id: str, message: str) -> None:
        entry = self._state.jobs[job_id]
        entry.rec.message = None
        self._state.move(entry, JobState.WAITING, EventKind.REOPENED, self._now,
                         message=message)
