"""Flow control for the memory backend: paused queues, unique locks, concurrency limits,
ordered keys, rates.

``MemoryFlow`` pauses and resumes queues (``dequeue`` skips a paused one). ``FlowGate`` holds
only bookkeeping; the storage calls it under its own lock, so nothing here
locks. Rules (the same every backend enforces):

* ``unique_key``: held while the holder is not terminal, and at least ``unique_for`` seconds
  after it was enqueued.
* ``concurrency_key``: the costs of a key's active jobs never exceed the job's
  ``concurrency_limit`` (a job costs 1 unless it says more).
* ``order_key``: one job of a key at a time, in enqueue order: the oldest job of the key that is
  pending, active or retrying holds it (so a retrying job keeps its place; a job scheduled for
  later takes its place only once it is due).
* ``rate_key``: a job may start at ``now`` while fewer than ``rate_limit`` jobs of its key
  started in ``(now - rate_period, now]``: a sliding log of start times, so no span of
  ``rate_period`` seconds ever holds more than ``rate_limit`` starts. A key's log is
  forgotten once its newest start has left the window (``forget_idle_rates``).
* ``fold_key`` (debounce, throttle): a call joins the job of its key while that job is still
  ``scheduled`` (``fold_holder``); once it started, the next call makes a new job.
* ``breaker_key``: an open breaker holds its key's jobs pending until one is leased as the
  probe (``storage/breakers.py``; the rows are ``breakers``, acks update them).
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from conveyor.core.job import Event, EventKind, FlowControl, JobRecord, JobState
from conveyor.storage.breakers import HELD, PROBE, START, BreakerRow, lease_verdict, probe


class MemoryFlow:
    """``pause_queue`` and ``resume_queue`` over the store's set of paused queues, under its
    lock (``wake``: wake idle workers)."""

    def __init__(self, lock: AbstractContextManager[Any], paused: set[str],
                 wake: Callable[[], None]) -> None:
        self._lock = lock
        self._paused = paused
        self._wake = wake

    def pause_queue(self, queue: str) -> None:
        """Stop every worker from taking jobs from ``queue``."""
        with self._lock:
            self._paused.add(queue)

    def resume_queue(self, queue: str) -> None:
        """Undo ``pause_queue``."""
        with self._lock:
            self._paused.discard(queue)
            self._wake()


@dataclass(slots=True)
class ScanBudget:
    """What one ``dequeue`` call has tentatively taken, so limits hold within the call too."""

    concurrency: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ordered: set[str] = field(default_factory=set)
    rate: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: Breaker keys whose probe this call took (any other job of the key waits).
    probed: set[str] = field(default_factory=set)


class FlowGate:
    """Flow-control bookkeeping over the storage's jobs (looked up through ``lookup``)."""

    def __init__(self, lookup: Callable[[str], tuple[JobRecord, int] | None]) -> None:
        self._lookup = lookup
        self._unique: dict[str, str] = {}
        self._folds: dict[str, str] = {}
        self._active: dict[str, int] = defaultdict(int)
        self._order_heads: dict[str, list[tuple[int, str]]] = {}
        self._order_active: dict[str, int] = defaultdict(int)
        self._starts: dict[str, deque[float]] = {}
        # When each rate key's newest start leaves its window, and a heap of the same with one
        # entry per key (possibly older than the dict's value), to forget idle keys' logs.
        self._rate_ends: dict[str, float] = {}
        self._idle: list[tuple[float, str]] = []
        #: Breaker key -> its row; a key without one is closed (storage/breakers.py).
        self.breakers: dict[str, BreakerRow] = {}

    # -- unique ------------------------------------------------------------------------------

    def unique_holder(self, flow: FlowControl | None, now: float) -> str | None:
        """Id of the job holding ``flow.unique_key``, or None when the lock is free."""
        if flow is None or not flow.unique_key:
            return None
        holder = self._unique.get(flow.unique_key)
        found = self._lookup(holder) if holder else None
        if found is None:
            return None
        rec = found[0]
        unique_for = rec.flow.unique_for if rec.flow else None
        held_until = rec.created_at + (unique_for or 0.0)
        if not rec.state.terminal or now < held_until:
            return holder
        return None

    def fold_holder(self, flow: FlowControl | None) -> JobRecord | None:
        """The scheduled job a debounced or throttled call joins, or None (make one)."""
        if flow is None or not flow.fold_key:
            return None
        holder = self._folds.get(flow.fold_key)
        found = self._lookup(holder) if holder else None
        return found[0] if found is not None and found[0].state is JobState.SCHEDULED else None

    def joined(self, rec: JobRecord, seq: int) -> None:
        """A job was stored: take its unique lock, its fold key and its place in its order
        key."""
        flow = rec.flow
        if flow is None:
            return
        if flow.unique_key:
            self._unique[flow.unique_key] = rec.id
        if flow.fold_key:
            self._folds[flow.fold_key] = rec.id
        if flow.order_key:
            heapq.heappush(self._order_heads.setdefault(flow.order_key, []), (seq, rec.id))

    def reopened(self, rec: JobRecord, seq: int) -> None:
        """A terminal job was retried by hand: it needs its order place back."""
        if rec.flow and rec.flow.order_key:
            heapq.heappush(self._order_heads.setdefault(rec.flow.order_key, []), (seq, rec.id))

    # -- dequeue -----------------------------------------------------------------------------

    def allows(self, rec: JobRecord, now: float, budget: ScanBudget) -> bool:
        """Whether ``rec`` may start now, counting what this dequeue call already took."""
        flow = rec.flow
        if flow is None:
            return True
        key = flow.concurrency_key
        if key and 0 < flow.concurrency_limit < (self._active[key] + budget.concurrency[key]
                                                 + flow.cost):
            return False  # the limit counts cost: a job takes ``cost`` of its key's slots
        key = flow.order_key
        if key and (
            key in budget.ordered or self._order_active[key] > 0 or self._order_head(key) != rec.id
        ):
            return False
        if flow.breaker_key and self._breaker(flow.breaker_key, now, budget) == HELD:
            return False
        key = flow.rate_key
        if not key or flow.rate_limit <= 0:
            return True
        return self._recent_starts(key, flow.rate_period, now) + budget.rate[key] < flow.rate_limit

    def _breaker(self, key: str, now: float, budget: ScanBudget) -> str:
        row = self.breakers.get(key)
        if row is None:
            return START
        found = self._lookup(row.probe_id) if row.probe_id else None
        running = key in budget.probed or (
            found is not None and found[0].state is JobState.ACTIVE)
        return lease_verdict(row, now, running)

    def reserve(self, rec: JobRecord, budget: ScanBudget, now: float) -> None:
        """Count ``rec`` as taken within the current dequeue call (a breaker's probe is made
        here: it is the job this call leases)."""
        flow = rec.flow
        if flow is None:
            return
        if flow.concurrency_key:
            budget.concurrency[flow.concurrency_key] += flow.cost
        if flow.order_key:
            budget.ordered.add(flow.order_key)
        if flow.rate_key:
            budget.rate[flow.rate_key] += 1
        key = flow.breaker_key
        if key and key not in budget.probed and key in self.breakers:
            row = self.breakers[key]
            if self._breaker(key, now, budget) == PROBE:
                budget.probed.add(key)
                assert rec.events is not None
                rec.events.append(Event(ts=now, kind=EventKind.BREAKER, state="pending",
                                        message=probe(row, rec.id)))

    def started(self, rec: JobRecord, now: float) -> None:
        """``rec`` became active."""
        flow = rec.flow
        if flow is None:
            return
        if flow.concurrency_key:
            self._active[flow.concurrency_key] += flow.cost
        if flow.order_key:
            self._order_active[flow.order_key] += 1
        key = flow.rate_key
        if key and flow.rate_limit > 0:
            self._starts.setdefault(key, deque()).append(now)
            end = now + flow.rate_period
            if key not in self._rate_ends:
                heapq.heappush(self._idle, (end, key))
            self._rate_ends[key] = max(end, self._rate_ends.get(key, end))

    def forget_idle_rates(self, now: float) -> None:
        """Drop the start logs of rate keys whose newest start left the window more than a
        second ago (the second absorbs rounding in ``now + period``), so the logs stay bounded
        by the keys in use, as on Redis."""
        while self._idle and self._idle[0][0] < now - 1:
            end, key = heapq.heappop(self._idle)
            latest = self._rate_ends[key]
            if latest > end:
                heapq.heappush(self._idle, (latest, key))  # started again since: look later
            else:
                del self._rate_ends[key]
                self._starts.pop(key, None)

    def stopped(self, rec: JobRecord) -> None:
        """``rec`` left the active state."""
        flow = rec.flow
        if flow is None:
            return
        if flow.concurrency_key:
            self._active[flow.concurrency_key] -= flow.cost
        if flow.order_key:
            self._order_active[flow.order_key] -= 1

    def order_holder(self, key: str) -> str | None:
        """The job holding ``key`` now: its oldest unfinished job that is due (explain)."""
        return self._order_head(key)

    def starts(self, key: str, period: float, now: float) -> list[float]:
        """The start times of rate key ``key`` within its window (explain)."""
        self._recent_starts(key, period, now)
        return list(self._starts.get(key, ()))

    def _order_head(self, key: str) -> str | None:
        heap = self._order_heads.get(key, [])
        later: list[tuple[int, str]] = []
        head = None
        while heap:
            seq, job_id = heap[0]
            found = self._lookup(job_id)
            if found is None or found[1] != seq or found[0].state.terminal:
                heapq.heappop(heap)  # finished or deleted: it no longer holds the key
            elif found[0].state is JobState.SCHEDULED:
                later.append(heapq.heappop(heap))  # not due yet: it waits its turn later
            else:
                head = job_id
                break
        for item in later:
            heapq.heappush(heap, item)
        return head

    def _recent_starts(self, key: str, period: float, now: float) -> int:
        starts = self._starts.get(key)
        if not starts:
            return 0
        while starts and starts[0] <= now - period:
            starts.popleft()
        return len(starts)
