"""The memory backend's ``Inspector``: reads and operator actions over ``MemoryState``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from conveyor.core.job import TERMINAL_STATES, EventKind, JobRecord, JobState
from conveyor.storage import graph_retry
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.graph import GraphNode
from conveyor.storage.job_heads import HEAD_CHARS, JobHead
from conveyor.storage.memory.entry import WAITING_STATES, Entry
from conveyor.storage.memory.state import MemoryState
from conveyor.storage.queue_stats import QueueStats
from conveyor.storage.retention import Retention
from conveyor.storage.stored_data import StoredData
from conveyor.storage.totals import JobTotals, MinuteTotals, history_start, today_start
from conveyor.storage.workers import WorkerInfo

_RETRYABLE = frozenset({JobState.DEAD, JobState.FAILED, JobState.CANCELLED, JobState.RETRYING})
_NOT_ACTIVE = frozenset(JobState) - {JobState.ACTIVE}
_WORKER_TTL = Retention().worker_ttl
WORKER_COMMANDS = ("quiet", "stop")


class MemoryInspector:
    """The ``Inspector`` protocol over ``MemoryState`` (pausing queues: ``MemoryFlow``,
    schedules: ``MemorySchedules``)."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state

    def queues(self) -> list[QueueStats]:
        """Every known queue with sizes, latency, paused flag and outcome totals."""
        state = self.state
        with state.lock:
            now = state.now()
            return [self._queue_stats(q, now) for q in sorted({*state.queues, *state.paused})]

    def _queue_stats(self, queue: str, now: float) -> QueueStats:
        pending = self.state.pending.get(queue, {})
        oldest = next(iter(pending), None)
        latency = now - self.state.jobs[oldest].pending_since if oldest is not None else 0.0
        totals = [t for (q, _), t in self.state.totals.by_name.items() if q == queue]
        today = [row for (q, m), row in self.state.totals.minutes.items()
                 if q == queue and m >= today_start(now)]
        return QueueStats(
            name=queue,
            pending=len(pending),
            scheduled=self.state.counts[(queue, JobState.SCHEDULED)],
            active=self.state.counts[(queue, JobState.ACTIVE)],
            retrying=self.state.counts[(queue, JobState.RETRYING)],
            latency=max(latency, 0.0),
            paused=queue in self.state.paused,
            processed=sum(t.processed for t in totals),
            failed=sum(t.failed + t.dead for t in totals),
            dead=self.state.counts[(queue, JobState.DEAD)],
            processed_today=sum(row[0] for row in today),
            failed_today=sum(row[1] + row[2] for row in today),
            waiting=self.state.counts[(queue, JobState.WAITING)],
            aggregating=self.state.counts[(queue, JobState.AGGREGATING)],
        )

    def get_job(self, job_id: str) -> JobRecord | None:
        """A copy of the job with its full event log, or None."""
        with self.state.lock:
            entry = self.state.jobs.get(job_id)
            return None if entry is None else _copy(entry.rec, with_events=True)

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        batch_id: str | None = None,
        offset: int = 0,
        limit: int = 50,
        with_events: bool = False,
        newest_first: bool = False,
    ) -> list[JobRecord]:
        """Jobs filtered by state/queue/batch, oldest (first enqueued) first, paged."""
        with self.state.lock:
            out: list[JobRecord] = []
            matching = self._matching(state, queue, batch_id)
            if newest_first:
                matching = reversed(list(matching))
            for i, entry in enumerate(matching):
                if len(out) >= limit:
                    break
                if i >= offset:
                    out.append(_copy(entry.rec, with_events=with_events))
            return out

    def count_jobs(
        self, *, state: JobState | None = None, queue: str | None = None,
        batch_id: str | None = None,
    ) -> int:
        """How many jobs ``list_jobs`` would page through (from counters when it can)."""
        with self.state.lock:
            if batch_id is None:
                states = [state] if state is not None else list(JobState)
                queues = [queue] if queue is not None else list(self.state.queues)
                return sum(self.state.counts.get((q, s), 0) for q in queues for s in states)
            # Batch counters keep trimmed jobs (they are history); this must match list_jobs.
            return sum(1 for _ in self._matching(state, queue, batch_id))

    def job_heads(self, *, state: JobState | None = None, queue: str | None = None,
                  offset: int = 0, limit: int = 50, chars: int = HEAD_CHARS) -> list[JobHead]:
        """See ``Inspector.job_heads``."""
        with self.state.lock:
            newest = list(self._matching(state, queue, None))[::-1][offset:offset + limit]
            return [JobHead(id=r.id, name=r.name, queue=r.queue, state=r.state,
                            created_at=r.created_at, payload=r.payload[:chars],
                            message=(r.message or "")[:chars])
                    for r in (entry.rec for entry in newest)]

    def _matching(
        self, state: JobState | None, queue: str | None, batch_id: str | None
    ) -> Iterator[Entry]:
        for entry in self.state.jobs.values():
            rec = entry.rec
            if (state is None or rec.state is state) and (queue is None or rec.queue == queue) \
                    and (batch_id is None or rec.batch_id == batch_id):
                yield entry

    def retry_jobs(self, job_ids: Sequence[str]) -> int:
        """Dead, failed, cancelled or retrying jobs → pending now (``retried``); a workflow
        node never released → waiting, or left as it is (``storage/graph_retry.py``)."""
        with self.state.lock:
            now = self.state.now()
            entries = [e for i in dict.fromkeys(job_ids)
                       if (e := self.state.jobs.get(i)) is not None and e.rec.state in _RETRYABLE]
            plan = graph_retry.plan(self.state.graph_txn(), [e.rec.id for e in entries])
            moved = [e for e in entries if e.rec.id not in plan.refused]
            for entry in moved:
                self._retry_one(entry, now, entry.rec.id in plan.waiting)
            return len(moved)

    def retry_refusals(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Of ``job_ids``, the workflow nodes a retry by hand leaves as they are, and why."""
        with self.state.lock:
            ids = [i for i in dict.fromkeys(job_ids)
                   if (e := self.state.jobs.get(i)) is not None and e.rec.state in _RETRYABLE]
            return graph_retry.plan(self.state.graph_txn(), ids).refused

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete jobs that are not active."""
        return self._each(job_ids, _NOT_ACTIVE, self.state.remove)

    def kill_jobs(self, job_ids: Sequence[str]) -> int:
        """Waiting jobs → dead (``killed``)."""
        return self._each(job_ids, WAITING_STATES, self._kill_one)

    def reseal(self, job_id: str, old: StoredData, new: StoredData) -> bool:
        """Payload, result and message replaced when they still equal ``old``."""
        with self.state.lock:
            entry = self.state.jobs.get(job_id)
            if entry is None or StoredData(entry.rec.payload, entry.rec.result,
                                           entry.rec.message) != old:
                return False
            entry.rec.payload, entry.rec.result, entry.rec.message = (
                new.payload, new.result, new.message)
            return True

    def _each(self, job_ids: Sequence[str], states: frozenset[JobState],
              act: Callable[[Entry, float], None]) -> int:
        """Apply ``act`` to each existing job in one of ``states``; returns how many."""
        with self.state.lock:
            now = self.state.now()
            done = 0
            for job_id in job_ids:
                entry = self.state.jobs.get(job_id)
                if entry is not None and entry.rec.state in states:
                    act(entry, now)
                    done += 1
            return done

    def _retry_one(self, entry: Entry, now: float, waits: bool) -> None:
        if entry.rec.state.terminal:
            self.state.flow.reopened(entry.rec, entry.seq)
        entry.rec.run_at = None
        entry.rec.cancel_requested = False
        entry.rec.message = None
        self.state.move(entry, JobState.WAITING if waits else JobState.PENDING, EventKind.RETRIED,
                        now)

    def _kill_one(self, entry: Entry, now: float) -> None:
        entry.rec.message = "killed by hand"
        self.state.move(entry, JobState.DEAD, EventKind.KILLED, now, message=entry.rec.message)

    def retry_all(self, state: JobState = JobState.DEAD, queue: str | None = None) -> int:
        """Retry every job in ``state``."""
        with self.state.lock:
            return self.retry_jobs([e.rec.id for e in self._matching(state, queue, None)])

    def clear(self, state: JobState = JobState.DEAD, queue: str | None = None) -> int:
        """Delete every job in a terminal ``state``."""
        if state not in TERMINAL_STATES:
            raise ValueError(f"clear() deletes finished jobs only, not {state.value!r} ones")
        with self.state.lock:
            return self.delete_jobs([e.rec.id for e in self._matching(state, queue, None)])

    def workers(self) -> list[WorkerInfo]:
        """Workers seen within the registry's time-to-live."""
        with self.state.lock:
            cutoff = self.state.now() - _WORKER_TTL
            live = [w for w in self.state.workers.values() if w.last_seen >= cutoff]
            return sorted(live, key=lambda w: (w.started_at, w.id))

    def command_worker(self, worker_id: str, command: str) -> bool:
        """Queue ``quiet`` or ``stop`` for a known worker; False when it is not registered."""
        if command not in WORKER_COMMANDS:
            raise ValueError(f"unknown worker command {command!r}; use one of {WORKER_COMMANDS}")
        with self.state.lock:
            if worker_id not in self.state.workers:
                return False
            self.state.commands[worker_id] = command
            return True

    def get_batch(self, batch_id: str) -> BatchStatus | None:
        """Counters and timings of a batch."""
        with self.state.lock:
            return self.state.batches.status(batch_id)

    def list_batches(self, offset: int = 0, limit: int = 50,
                     kind: str | None = None) -> list[BatchStatus]:
        """Batches (of one ``kind`` when given: "batch" or "workflow"), newest first."""
        with self.state.lock:
            return self.state.batches.page(offset, limit, kind)

    def workflow_graph(self, workflow_id: str, limit: int = 2000) -> list[GraphNode]:
        """Up to ``limit`` nodes of a workflow, in id order, with their state and parents."""
        with self.state.lock:
            found = sorted((e.rec for e in self._matching(None, None, workflow_id)
                            if e.rec.id in self.state.nodes), key=lambda rec: rec.id)
            return [GraphNode(rec.id, rec.name, rec.state, self.state.nodes[rec.id].node.parents)
                    for rec in found[:limit]]

    def cancel_batch(self, batch_id: str) -> int:
        """Cancel waiting jobs of a batch, request cancellation of active ones; returns both
        (an active job asked before is counted again, as on every backend, not asked twice)."""
        with self.state.lock:
            if self.state.batches.status(batch_id) is None:
                return 0  # nothing to cancel, as for a batch whose jobs all finished
            self.state.batches.mark_cancelled(batch_id)
            ids = [e.rec.id for e in self._matching(None, None, batch_id)
                   if e.rec.state in WAITING_STATES or e.rec.state is JobState.ACTIVE]
            for job_id in ids:
                self.state.cancel(job_id)
            return len(ids)

    def history(self, since: int = 0, queue: str | None = None) -> list[MinuteTotals]:
        """Outcomes per queue and minute of the last day, oldest first."""
        with self.state.lock:
            start = history_start(self.state.now(), since)
            return [MinuteTotals(q, m, *row) for (q, m), row in
                    sorted(self.state.totals.minutes.items(), key=lambda kv: (kv[0][1], kv[0][0]))
                    if m >= start and queue in (None, q)]

    def job_totals(self) -> list[JobTotals]:
        """All-time outcome counters per (queue, job name)."""
        with self.state.lock:
            return [
                JobTotals(queue=q, name=n, processed=t.processed, failed=t.failed, dead=t.dead,
                          retried=t.retried)
                for (q, n), t in sorted(self.state.totals.by_name.items())
            ]


def _copy(rec: JobRecord, *, with_events: bool) -> JobRecord:
    events = list(rec.events or []) if with_events else None
    return replace(rec, events=events)
