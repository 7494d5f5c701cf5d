"""The memory backend's hot path: the ``Storage`` protocol over ``MemoryState``, and
``open_memory``.

Every public method takes the one lock, so each is atomic exactly as a Lua script or a SQLite
transaction would be; every move of a job goes through ``MemoryState._move``.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from conveyor.core.clock import SYSTEM_CLOCK, Clock
from conveyor.core.job import (
    Ack,
    BatchSpec,
    EnqueueResult,
    Event,
    EventKind,
    HeartbeatReply,
    JobSpec,
    JobState,
    LeasedJob,
    Outcome,
)
from conveyor.errors import StorageURLError, WorkflowError
from conveyor.storage import graph
from conveyor.storage.aio import ThreadedAsync
from conveyor.storage.base import RefusesTransactions, WaitsThenDequeues
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.memory.flow import ScanBudget
from conveyor.storage.memory.gates import MemoryGates
from conveyor.storage.memory.groups import MemoryGroups
from conveyor.storage.memory.outbox import MemoryOutbox
from conveyor.storage.memory.schedules import MemorySchedules
from conveyor.storage.memory.state import Entry
from conveyor.storage.records import JobBlock, Retention, WorkerInfo, history_start
from conveyor.storage.rules import (
    DEADLINE_PASSED,
    LEASE_EXPIRED,
    WORKER_DIED,
    ack_message,
    broken_key,
    cancelled_message,
    counts_as_error,
    effective_outcome,
)


class MemoryStorage(RefusesTransactions, WaitsThenDequeues, MemoryOutbox, MemoryGroups,
                    MemoryGates, MemorySchedules, ThreadedAsync):
    """A ``Storage`` and ``Inspector`` held in process memory; thread-safe."""

    def __init__(self, url: str, clock: Clock) -> None:
        MemoryGates.__init__(self, url, clock)
        MemorySchedules.__init__(self)

    # -- enqueue -----------------------------------------------------------------------------

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs; see ``Storage.enqueue``. All or nothing: batches are checked first."""
        with self._lock:
            now = self.now()
            for batch_id in {s.batch_id for s in specs if s.batch_id}:
                self._batches.check_open(batch_id)
            results = [self._store(spec, now, wake=False) for spec in specs]
            self._wake()  # once per call, not once per job
            return results

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store a block of jobs; see ``Storage.enqueue_block``."""
        return self.enqueue(block.specs())

    # -- dequeue -----------------------------------------------------------------------------

    def dequeue(
        self, queues: Sequence[str], worker_id: str, count: int, lease_seconds: float,
        capacity: int = 0,
    ) -> list[LeasedJob]:
        """Lease pending jobs up to ``count`` slots; see ``Storage.dequeue``."""
        with self._lock:
            now = self.now()
            picked: list[Entry] = []
            ended: list[tuple[Entry, str, str]] = []
            budget = ScanBudget()
            self._flow.forget_idle_rates(now)
            room = count
            for queue in dict.fromkeys(queues):
                if room <= 0:
                    break
                if queue in self._paused:
                    continue
                if self._lined.get(queue):
                    room = self._walk(queue, now, room, capacity, budget, picked, ended)
                else:
                    room -= self._scan(queue, now, room, budget, picked, ended)
            for entry, kind, message in ended:
                self._end_unstarted(entry, kind, message, now)
            return [self._lease(entry, worker_id, now, lease_seconds) for entry in picked]

    def _scan(self, queue: str, now: float, wanted: int, budget: ScanBudget,
              picked: list[Entry], ended: list[tuple[Entry, str, str]]) -> int:
        """Arrival order (no job of the queue is placed by the lineup: each costs 1)."""
        taken = 0
        for job_id in self._pending.get(queue, ()):
            if taken >= wanted:
                return taken
            entry = self._jobs[job_id]
            rec = entry.rec
            if rec.deadline is not None and now > rec.deadline:
                ended.append((entry, EventKind.EXPIRED, DEADLINE_PASSED))
            elif (broken := broken_key(rec.flow)) is not None:
                ended.append((entry, EventKind.DEAD, broken))
            elif self._flow.allows(rec, now, budget):
                # Over-limit jobs are skipped, not retried: they keep their place and attempts.
                self._flow.reserve(rec, budget)
                picked.append(entry)
                taken += 1
        return taken

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until new work is stored (any queue: spurious wake-ups are allowed). Work
        stored since this thread's last wait timed out counts: waits in a row miss nothing."""
        with self._cond:
            seen = getattr(self._waited, "seen", None)
            seen = self._wakeups if seen is None else seen
            woken = self._cond.wait_for(lambda: self._wakeups != seen, timeout=timeout)
            self._waited.seen = None if woken else seen
            return woken

    # -- acknowledgements --------------------------------------------------------------------

    def ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Apply outcomes, each fenced by its lease token; see ``Storage.ack``."""
        with self._lock:
            now = self.now()
            return [self._apply(ack, now) for ack in acks]

    def _apply(self, ack: Ack, now: float) -> bool:
        entry = self._holder(ack.job_id, ack.token)
        if entry is None:
            stale = self._jobs.get(ack.job_id)
            if stale is not None:
                assert stale.rec.events is not None
                stale.rec.events.append(Event(
                    ts=now, kind=EventKind.ACK_REFUSED, state=stale.rec.state.value,
                    message="acknowledgement refused: this worker no longer holds the lease",
                    attempt=stale.rec.attempt, data={"outcome": ack.outcome.value}))
            return False
        rec = entry.rec
        assert rec.events is not None
        rec.events.extend(ack.events)
        if ack.progress is not None:
            rec.progress = ack.progress
        error = ack.error.to_wire() if ack.error else None
        message = ack_message(ack)
        outcome = effective_outcome(ack.outcome, rec.cancel_requested)
        if outcome is not ack.outcome:
            rec.errors += 1 if counts_as_error(ack) else 0
            message = cancelled_message(message)
        rec.message = message
        self._finish(entry, ack, outcome, now, message, error)
        return True

    def _finish(self, entry: Entry, ack: Ack, outcome: Outcome, now: float,
                message: str | None, error: dict[str, Any] | None) -> None:
        rec, worker = entry.rec, entry.rec.worker
        if outcome is Outcome.SUCCEEDED:
            rec.result = ack.result
            self._move(entry, JobState.SUCCEEDED, EventKind.SUCCEEDED, now, worker=worker,
                       message=ack.message)
        elif outcome is Outcome.FAILED:
            self._move(entry, JobState.FAILED, EventKind.FAILED, now, worker=worker,
                       message=message, data=error)
        elif outcome is Outcome.RETRY:
            rec.errors += 1
            delay = max(ack.retry_in or 0.0, 0.0)
            rec.run_at = now + delay
            self._totals_of(rec).retried += 1
            self._count_minute(rec.queue, now, 3)
            self._move(entry, JobState.RETRYING, EventKind.ERROR, now, worker=worker,
                       message=message,
                       data={**(error or {}), "retry": True, "retry_in": delay})
        elif outcome is Outcome.DEAD:
            rec.errors += 1 if ack.error else 0
            self._move(entry, JobState.DEAD, EventKind.DEAD, now, worker=worker,
                       message=message, data=error)
        elif outcome is Outcome.CANCELLED:
            self._move(entry, JobState.CANCELLED, EventKind.CANCELLED, now, worker=worker,
                       message=message, data=error)
        else:  # INTERRUPTED: put back untouched; a shutdown is not an error attempt
            self._move(entry, JobState.PENDING, EventKind.INTERRUPTED, now, worker=worker,
                       message=message or "interrupted by worker shutdown")

    def log(self, job_id: str, token: str, events: Sequence[Event],
            progress: tuple[int, int] | None = None) -> bool:
        """Append a running job's messages and progress; fenced like ``ack``."""
        with self._lock:
            entry = self._holder(job_id, token)
            if entry is None:
                return False
            assert entry.rec.events is not None
            entry.rec.events.extend(events)
            if progress is not None:
                entry.rec.progress = progress
            return True

    def add_nodes(self, adder: str, token: str,
                  specs: Sequence[JobSpec]) -> list[EnqueueResult] | None:
        """Store nodes a running job adds to its workflow; see ``Storage.add_nodes``."""
        with self._lock:
            entry = self._holder(adder, token)
            if entry is None:
                return None
            workflow_id = entry.rec.batch_id
            if adder not in self._nodes or workflow_id is None:
                raise WorkflowError(f"job {adder} is not a node of a workflow")
            known = [p for s in specs if s.node for p in s.node.parents
                     if p in self._nodes and (found := self._jobs.get(p)) is not None
                     and found.rec.batch_id == workflow_id]
            taken = [s.id for s in specs if (held := self._jobs.get(s.id)) is not None
                     and (s.id not in self._nodes or held.rec.batch_id != workflow_id)]
            graph.check_added(workflow_id, specs, known, taken)
            now = self.now()
            results = [self._store(spec, now, wake=False) for spec in specs]
            self._attach([r.id for r in results if r.created])
            self._wake()
            return results

    # -- leases, workers, schedules ----------------------------------------------------------

    def heartbeat(
        self, info: WorkerInfo, leases: Mapping[str, str], lease_seconds: float
    ) -> HeartbeatReply:
        """Register the worker, extend its leases; see ``Storage.heartbeat``."""
        with self._lock:
            now = self.now()
            self._workers[info.id] = replace(info, last_seen=now)
            lost: set[str] = set()
            cancel: set[str] = set()
            for job_id, token in leases.items():
                entry = self._holder(job_id, token)
                if entry is None:
                    lost.add(job_id)
                    continue
                entry.rec.lease_expires_at = now + lease_seconds
                if entry.rec.cancel_requested:
                    cancel.add(job_id)
            command = self._commands.pop(info.id, None)
            return HeartbeatReply(frozenset(lost), frozenset(cancel), command)

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry."""
        with self._lock:
            self._workers.pop(worker_id, None)
            self._commands.pop(worker_id, None)

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time came → pending; returns how many."""
        with self._lock:
            now = self.now()
            moved = 0
            while self._due and moved < limit:
                run_at, _, version, job_id = self._due[0]
                entry = self._jobs.get(job_id)
                if entry is not None and entry.version == version and run_at > now:
                    break
                heapq.heappop(self._due)
                if entry is not None and entry.version == version:
                    self._promote(entry, now)
                    moved += 1
            self._age(now)
            return moved + self._flush(now, limit)

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Active jobs whose lease expired → pending (or dead past ``max_recoveries``)."""
        with self._lock:
            now = self.now()
            expired = [
                self._jobs[job_id] for job_id in self._active
                if (self._jobs[job_id].rec.lease_expires_at or 0.0) <= now
            ][:limit]
            self._recover(expired, max_recoveries, now, LEASE_EXPIRED)
            return len(expired)

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        with self._lock:
            held = [self._jobs[job_id] for job_id in self._active
                    if self._jobs[job_id].rec.worker == worker_id]
            self._recover(held, max_recoveries, self.now(), WORKER_DIED)
            self.unregister_worker(worker_id)
            return len(held)

    def _recover(self, entries: list[Entry], max_recoveries: int, now: float, why: str) -> None:
        for entry in entries:
            rec = entry.rec
            rec.recoveries += 1
            if rec.cancel_requested:  # the lost attempt ends the job, as an error would
                rec.message = cancelled_message(why)
                self._move(entry, JobState.CANCELLED, EventKind.CANCELLED, now,
                           worker=rec.worker, message=rec.message)
            elif rec.recoveries > max_recoveries:
                rec.message = f"recovered {rec.recoveries} times (poison job?)"
                self._move(entry, JobState.DEAD, EventKind.DEAD, now, worker=rec.worker,
                           message=rec.message)
            else:
                self._move(entry, JobState.PENDING, EventKind.RECOVERED, now,
                           worker=rec.worker, message=f"{why}; put back to pending")

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one."""
        return self._cancel(job_id)

    # -- batches -----------------------------------------------------------------------------

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch."""
        with self._lock:
            self._batches.create(spec, self.now())

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch fully enqueued; completes it when every job is already terminal."""
        with self._lock:
            now = self.now()
            self._fire(self._batches.close(batch_id, now), now)

    def batch_finished(self, batch_id: str) -> AbstractContextManager[BatchWaiter]:
        """Wake-ups as batches finish (a condition; any batch: the caller reads again)."""
        return self._batches.waiter()

    # -- retention ---------------------------------------------------------------------------

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, batches and silent workers past retention."""
        with self._lock:
            now = self.now()
            keep_for = {
                JobState.SUCCEEDED: retention.succeeded_seconds,
                JobState.FAILED: retention.failed_seconds,
                JobState.CANCELLED: retention.failed_seconds,
                JobState.DEAD: retention.dead_seconds,
            }
            doomed = [e for e in self._jobs.values() if e.rec.state in keep_for
                      and (e.rec.finished_at or 0.0) < now - keep_for[e.rec.state]]
            gone = {e.rec.id for e in doomed}
            dead = sorted((e for e in self._jobs.values()
                           if e.rec.state is JobState.DEAD and e.rec.id not in gone),
                          key=lambda e: (e.rec.finished_at or 0.0, e.seq))
            doomed += dead[: max(len(dead) - retention.dead_max, 0)]
            for entry in doomed:
                # Batches keep their counters: they are the record of what happened.
                self._remove(entry, now, touch_batch=False)
            self._batches.trim(now - retention.batch_seconds)
            start = history_start(now)
            self._minutes = {k: v for k, v in self._minutes.items() if k[1] >= start}
            for worker_id, info in list(self._workers.items()):
                if info.last_seen < now - retention.worker_ttl:
                    self.unregister_worker(worker_id)
            return len(doomed)

    def tidy(self) -> bool:
        """Nothing to do: no old row versions pile up here (``Storage.tidy``)."""
        return False

    def check_server(self) -> list[str]:
        """Nothing to warn about: there is no server."""
        return []

    def close(self) -> None:
        """Nothing to release; named instances keep their data for other users."""


_named: dict[str, MemoryStorage] = {}
_named_lock = threading.Lock()


def open_memory(url: str, clock: Clock | None = None, *, create: bool = True,
                applied: list[str] | None = None) -> MemoryStorage:
    """Open ``memory://`` (always a new, empty store) or ``memory://NAME``.

    Every ``memory://NAME`` opened in this process with the same NAME returns the same store,
    so an app and an in-process worker share it; the first opener's clock is kept.
    ``create`` and ``applied`` are every opener's (``open_storage``): a memory store has no
    file or schema to create and no migration.
    """
    scheme, sep, name = url.partition("://")
    if scheme.lower() != "memory" or not sep:
        raise StorageURLError(f"not a memory storage URL: {url!r} (expected memory://[NAME])")
    name = name.strip("/")
    if any(c in name for c in "/?#"):
        raise StorageURLError(f"memory storage name {name!r} may not contain '/', '?' or '#'")
    if not name:
        return MemoryStorage(url, clock or SYSTEM_CLOCK)
    with _named_lock:
        store = _named.get(name)
        if store is None:
            store = _named[name] = MemoryStorage(url, clock or SYSTEM_CLOCK)
        return store
