"""The memory backend's hot path: the ``Storage`` protocol over ``MemoryState``, and
``open_memory``.

Every public method takes the one lock, so each is atomic exactly as a Lua script or a SQLite
transaction would be; every move of a job goes through ``MemoryState.move``. The rest of the
protocols is the parts' (``delegate``), each made over the same state: the inspector, pausing
(``flow.py``), schedules, the outbox and the asyncio face.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from conveyor.core.clock import SYSTEM_CLOCK, Clock
from conveyor.core.job import (
    Ack,
    BatchSpec,
    EnqueueResult,
    Event,
    HeartbeatReply,
    JobSpec,
    JobState,
    LeasedJob,
)
from conveyor.errors import StorageURLError, WorkflowError
from conveyor.storage import graph
from conveyor.storage.aio import ThreadedAsync
from conveyor.storage.base import Leases, Storage, WaitsThenDequeues, transactions_refused
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.blocks import JobBlock
from conveyor.storage.delegate import delegate
from conveyor.storage.memory import acks as acks_of
from conveyor.storage.memory.breakers import MemoryBreakers
from conveyor.storage.memory.durable import MemoryDurable
from conveyor.storage.memory.entry import Entry
from conveyor.storage.memory.flow import MemoryFlow, ScanBudget
from conveyor.storage.memory.gates import MemoryGates
from conveyor.storage.memory.groups import MemoryGroups
from conveyor.storage.memory.inspect import MemoryInspector
from conveyor.storage.memory.lineup import MemoryLineups
from conveyor.storage.memory.outbox import MemoryOutbox
from conveyor.storage.memory.schedules import MemorySchedules
from conveyor.storage.memory.state import MemoryState
from conveyor.storage.retention import Retention
from conveyor.storage.rules import (
    LEASE_EXPIRED,
    WORKER_DIED,
)
from conveyor.storage.schedule_edits import ScheduleEdits
from conveyor.storage.workers import WorkerInfo


class MemoryStorage:
    """A ``Storage`` and ``Inspector`` held in process memory; thread-safe."""

    now = delegate("state", MemoryState.now)
    wait_dequeue = delegate("_waits", WaitsThenDequeues.wait_dequeue)
    # the Inspector
    queues = delegate("_inspector", MemoryInspector.queues)
    get_job = delegate("_inspector", MemoryInspector.get_job)
    list_jobs = delegate("_inspector", MemoryInspector.list_jobs)
    count_jobs = delegate("_inspector", MemoryInspector.count_jobs)
    job_heads = delegate("_inspector", MemoryInspector.job_heads)
    retry_jobs = delegate("_inspector", MemoryInspector.retry_jobs)
    retry_refusals = delegate("_inspector", MemoryInspector.retry_refusals)
    delete_jobs = delegate("_inspector", MemoryInspector.delete_jobs)
    kill_jobs = delegate("_inspector", MemoryInspector.kill_jobs)
    reseal = delegate("_inspector", MemoryInspector.reseal)
    retry_all = delegate("_inspector", MemoryInspector.retry_all)
    clear = delegate("_inspector", MemoryInspector.clear)
    workers = delegate("_inspector", MemoryInspector.workers)
    command_worker = delegate("_inspector", MemoryInspector.command_worker)
    get_batch = delegate("_inspector", MemoryInspector.get_batch)
    list_batches = delegate("_inspector", MemoryInspector.list_batches)
    cancel_batch = delegate("_inspector", MemoryInspector.cancel_batch)
    workflow_graph = delegate("_inspector", MemoryInspector.workflow_graph)
    history = delegate("_inspector", MemoryInspector.history)
    job_totals = delegate("_inspector", MemoryInspector.job_totals)
    gate_facts = delegate("_gates", MemoryGates.gate_facts)
    breakers = delegate("_breakers", MemoryBreakers.breakers)
    close_breaker = delegate("_breakers", MemoryBreakers.close_breaker)
    pause_queue = delegate("_flow", MemoryFlow.pause_queue)
    resume_queue = delegate("_flow", MemoryFlow.resume_queue)
    # schedules (Storage and Inspector)
    schedule_ticked = delegate("_schedules", MemorySchedules.schedule_ticked)
    schedules = delegate("_schedules", MemorySchedules.schedules)
    schedule_changes = delegate("_schedules", MemorySchedules.schedule_changes)
    save_schedules = delegate("_edits", ScheduleEdits.save_schedules)
    schedule_pauses = delegate("_edits", ScheduleEdits.schedule_pauses)
    pause_schedule = delegate("_edits", ScheduleEdits.pause_schedule)
    resume_schedule = delegate("_edits", ScheduleEdits.resume_schedule)
    add_schedule = delegate("_edits", ScheduleEdits.add_schedule)
    change_schedule = delegate("_edits", ScheduleEdits.change_schedule)
    reset_schedule = delegate("_edits", ScheduleEdits.reset_schedule)
    remove_schedule = delegate("_edits", ScheduleEdits.remove_schedule)
    # the Outbox
    publish_due = delegate("_outbox", MemoryOutbox.publish_due)
    publish_failed = delegate("_outbox", MemoryOutbox.publish_failed)
    start = delegate("_outbox", MemoryOutbox.start)
    order_keys = delegate("_outbox", MemoryOutbox.order_keys)
    bury = delegate("_outbox", MemoryOutbox.bury)
    # asyncio: the blocking calls in a thread
    aenqueue = delegate("_async", ThreadedAsync.aenqueue)
    aget_job = delegate("_async", ThreadedAsync.aget_job)
    afinished = delegate("_async", ThreadedAsync.afinished)
    aclose = delegate("_async", ThreadedAsync.aclose)

    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url
        self.state = MemoryState(url, clock)
        self._groups = MemoryGroups(self.state)
        self.durable = MemoryDurable(self.state)
        self._inspector = MemoryInspector(self.state)
        self._flow = MemoryFlow(self.state.lock, self.state.paused, self.state.wake)
        self._breakers = MemoryBreakers(self.state)
        self._schedules = MemorySchedules()
        self._edits = ScheduleEdits(self.now, self._schedules)
        self._outbox = MemoryOutbox(self.state)
        self._lineups = MemoryLineups(self.state)
        self._gates = MemoryGates(self.state, self._inspector, self._lineups, self._outbox)
        self._waits = WaitsThenDequeues(self.wait, self.dequeue, self.ack)
        self._async = ThreadedAsync(self.enqueue, self._inspector.get_job)

    def bind(self, connection: object) -> Storage:
        """Refuse: this storage cannot write inside someone else's transaction."""
        raise transactions_refused(self.url, connection)

    # -- enqueue -----------------------------------------------------------------------------

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs; see ``Storage.enqueue``. All or nothing: batches are checked first."""
        state = self.state
        with state.lock:
            now = state.now()
            for batch_id in {s.batch_id for s in specs if s.batch_id}:
                state.batches.check_open(batch_id)
            results = [state.store(spec, now, wake=False) for spec in specs]
            state.wake()  # once per call, not once per job
            return results

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store a block of jobs; see ``Storage.enqueue_block``."""
        return self.enqueue(block.specs())

    # -- dequeue -----------------------------------------------------------------------------

    def dequeue(
        self, queues: Sequence[str], worker_id: str, count: int, lease_seconds: float,
        capacity: int = 0, acks: Sequence[Ack] = (),
    ) -> Leases:
        """Apply ``acks``, then lease pending jobs up to ``count`` slots, under one hold of
        the lock; see ``Storage.dequeue``."""
        state = self.state
        with state.lock:
            now = state.now()
            acked = [acks_of.apply(state, self.durable, ack, now) for ack in acks]
            picked: list[Entry] = []
            ended: list[tuple[Entry, str, str]] = []
            budget = ScanBudget()
            state.flow.forget_idle_rates(now)
            room = count
            for queue in dict.fromkeys(queues):
                if room <= 0:
                    break
                if queue in state.paused:
                    continue
                if state.lined.get(queue):
                    room = self._lineups.walk(queue, now, room, capacity, budget, picked, ended)
                else:
                    room -= self._lineups.scan(queue, now, room, budget, picked, ended)
            for entry, kind, message in ended:
                state.end_unstarted(entry, kind, message, now)
            return Leases((state.lease(entry, worker_id, now, lease_seconds) for entry in picked),
                          acked)

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until new work is stored (any queue: spurious wake-ups are allowed). Work
        stored since this thread's last wait timed out counts: waits in a row miss nothing."""
        state = self.state
        with state.cond:
            seen = getattr(state.waited, "seen", None)
            seen = state.wakeups if seen is None else seen
            woken = state.cond.wait_for(lambda: state.wakeups != seen, timeout=timeout)
            state.waited.seen = None if woken else seen
            return woken

    # -- acknowledgements --------------------------------------------------------------------

    def ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Apply outcomes, each fenced by its lease token; see ``Storage.ack``."""
        with self.state.lock:
            now = self.state.now()
            return [acks_of.apply(self.state, self.durable, ack, now) for ack in acks]

    def log(self, job_id: str, token: str, events: Sequence[Event],
            progress: tuple[int, int] | None = None) -> bool:
        """Append a running job's messages and progress; fenced like ``ack``."""
        with self.state.lock:
            entry = self.state.holder(job_id, token)
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
        with self.state.lock:
            entry = self.state.holder(adder, token)
            if entry is None:
                return None
            workflow_id = entry.rec.batch_id
            if adder not in self.state.nodes or workflow_id is None:
                raise WorkflowError(f"job {adder} is not a node of a workflow")
            known = [p for s in specs if s.node for p in s.node.parents
                     if p in self.state.nodes and (found := self.state.jobs.get(p)) is not None
                     and found.rec.batch_id == workflow_id]
            taken = [s.id for s in specs if (held := self.state.jobs.get(s.id)) is not None
                     and (s.id not in self.state.nodes or held.rec.batch_id != workflow_id)]
            graph.check_added(workflow_id, specs, known, taken)
            now = self.state.now()
            results = [self.state.store(spec, now, wake=False) for spec in specs]
            self.state.attach([r.id for r in results if r.created])
            self.state.wake()
            return results

    def gather(self, lead: str, token: str) -> list[LeasedJob] | None:
        """Lease the members of ``lead``'s group for its run; see ``Storage.gather``."""
        with self.state.lock:
            entry = self.state.holder(lead, token)
            return None if entry is None else self._groups.gather(entry, self.state.now())

    # -- leases, workers, schedules ----------------------------------------------------------

    def heartbeat(
        self, info: WorkerInfo, leases: Mapping[str, str], lease_seconds: float
    ) -> HeartbeatReply:
        """Register the worker, extend its leases; see ``Storage.heartbeat``."""
        with self.state.lock:
            now = self.state.now()
            self.state.workers[info.id] = replace(info, last_seen=now)
            lost: set[str] = set()
            cancel: set[str] = set()
            for job_id, token in leases.items():
                entry = self.state.holder(job_id, token)
                if entry is None:
                    lost.add(job_id)
                    continue
                entry.rec.lease_expires_at = now + lease_seconds
                if entry.rec.cancel_requested:
                    cancel.add(job_id)
            command = self.state.commands.pop(info.id, None)
            return HeartbeatReply(frozenset(lost), frozenset(cancel), command)

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry."""
        with self.state.lock:
            self.state.workers.pop(worker_id, None)
            self.state.commands.pop(worker_id, None)

    def promote_due(self, limit: int = 1000) -> int:
        """Scheduled and retrying jobs whose time came → pending; returns how many."""
        with self.state.lock:
            now = self.state.now()
            moved = 0
            while self.state.due and moved < limit:
                run_at, _, version, job_id = self.state.due[0]
                entry = self.state.jobs.get(job_id)
                if entry is not None and entry.version == version and run_at > now:
                    break
                heapq.heappop(self.state.due)
                if entry is not None and entry.version == version:
                    self._groups.promote(entry, now)
                    moved += 1
            self._lineups.age(now)
            return moved + self._groups.flush(now, limit)

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Active jobs whose lease expired → pending (or dead past ``max_recoveries``)."""
        with self.state.lock:
            now = self.state.now()
            expired = [
                self.state.jobs[job_id] for job_id in self.state.active
                if (self.state.jobs[job_id].rec.lease_expires_at or 0.0) <= now
            ][:limit]
            self.state.recover(expired, max_recoveries, now, LEASE_EXPIRED)
            return len(expired)

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        with self.state.lock:
            held = [self.state.jobs[job_id] for job_id in self.state.active
                    if self.state.jobs[job_id].rec.worker == worker_id]
            self.state.recover(held, max_recoveries, self.state.now(), WORKER_DIED)
            self.unregister_worker(worker_id)
            return len(held)

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or request cancellation of an active one."""
        return self.state.cancel(job_id)

    # -- batches -----------------------------------------------------------------------------

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch."""
        with self.state.lock:
            self.state.batches.create(spec, self.state.now())

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch fully enqueued; completes it when every job is already terminal."""
        with self.state.lock:
            now = self.state.now()
            self.state.fire(self.state.batches.close(batch_id, now), now)

    def batch_finished(self, batch_id: str) -> AbstractContextManager[BatchWaiter]:
        """Wake-ups as batches finish (a condition; any batch: the caller reads again)."""
        return self.state.batches.waiter()

    # -- retention ---------------------------------------------------------------------------

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, batches and silent workers past retention."""
        with self.state.lock:
            now = self.state.now()
            keep_for = {
                JobState.SUCCEEDED: retention.succeeded_seconds,
                JobState.FAILED: retention.failed_seconds,
                JobState.CANCELLED: retention.failed_seconds,
                JobState.DEAD: retention.dead_seconds,
            }
            doomed = [e for e in self.state.jobs.values() if e.rec.state in keep_for
                      and (e.rec.finished_at or 0.0) < now - keep_for[e.rec.state]]
            gone = {e.rec.id for e in doomed}
            dead = sorted((e for e in self.state.jobs.values()
                           if e.rec.state is JobState.DEAD and e.rec.id not in gone),
                          key=lambda e: (e.rec.finished_at or 0.0, e.seq))
            doomed += dead[: max(len(dead) - retention.dead_max, 0)]
            for entry in doomed:
                # Batches keep their counters: they are the record of what happened.
                self.state.remove(entry, now, touch_batch=False)
            self.state.batches.trim(now - retention.batch_seconds)
            self.state.totals.trim(now)
            for worker_id, info in list(self.state.workers.items()):
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
