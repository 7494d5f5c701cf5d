"""The operators' side of the storage boundary: what the CLI, web UI and metrics read and do
(``storage/base.py`` holds the hot path; every backend implements both)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from conveyor.core.breaker import BreakerState
from conveyor.core.job import JobRecord, JobState
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.durable import DurableStore
from conveyor.storage.gates import GateFacts
from conveyor.storage.graph import GraphNode
from conveyor.storage.job_heads import HEAD_CHARS, JobHead
from conveyor.storage.queue_stats import QueueStats
from conveyor.storage.schedule_records import ScheduleChange, ScheduleInfo
from conveyor.storage.stored_data import StoredData
from conveyor.storage.totals import JobTotals, MinuteTotals
from conveyor.storage.workers import WorkerInfo


@runtime_checkable
class Inspector(Protocol):
    """Reads and operator actions for the CLI, web UI and metrics.

    A read on a store that cannot be reached or used (server down, file locked past the busy
    timeout, not a database) raises ``StorageUnavailable`` on every backend, so a caller
    reports it without knowing which backend failed.
    """

    #: A durable job's steps and wait, read with ``durable.read(job_id)`` (docs/durable.md).
    durable: DurableStore

    def now(self) -> float:
        """The storage's clock (as ``Storage.now``): ages and ETAs are measured against it."""
        ...

    def queues(self) -> list[QueueStats]:
        """Every known queue with sizes, latency, paused flag and outcome totals."""
        ...

    def get_job(self, job_id: str) -> JobRecord | None:
        """A job with its full event log, or None."""
        ...

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
        """Jobs filtered by state/queue/batch, oldest first (``newest_first``: newest
        first), paged."""
        ...

    def count_jobs(
        self, *, state: JobState | None = None, queue: str | None = None,
        batch_id: str | None = None,
    ) -> int:
        """How many jobs ``list_jobs`` would page through."""
        ...

    def gate_facts(self, job_id: str, place: bool = True) -> GateFacts | None:
        """What the fetch would weigh for the job now (its queue paused, the holders of its
        limits, its place in its queue's lineup, its parents, its aggregation), read from the
        state the fetch itself decides by; None for an unknown id (``client/explain.py``).
        ``place=False`` leaves out its place in the lineup (what a list of jobs shows)."""
        ...

    def job_heads(
        self, *, state: JobState | None = None, queue: str | None = None, offset: int = 0,
        limit: int = 50, chars: int = HEAD_CHARS,
    ) -> list[JobHead]:
        """The jobs ``list_jobs(state=, queue=, offset=, limit=, newest_first=True)`` pages
        through, each read only as far as a search needs: identity, state, creation time and
        the first ``chars`` characters of its payload text and of its message. No whole
        payload, result or event log is read (a search stays bounded however big jobs are)."""
        ...

    def retry_jobs(self, job_ids: Sequence[str]) -> int:
        """Dead, failed, cancelled or retrying jobs → pending now (``retried``); returns count.

        A workflow node the graph never released goes back to ``waiting`` instead, to be
        decided again by its parents, or is left as it is when their outcomes would end it
        again (``retry_refusals`` says why; ``storage/graph_retry.py``)."""
        ...

    def retry_refusals(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Of ``job_ids``, the workflow nodes ``retry_jobs`` leaves as they are, each with a
        one-line reason naming the job to retry instead."""
        ...

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete jobs that are not active; returns how many were deleted."""
        ...

    def kill_jobs(self, job_ids: Sequence[str]) -> int:
        """Waiting jobs (scheduled, pending, retrying) → dead (``killed``); returns count."""
        ...

    def reseal(self, job_id: str, old: StoredData, new: StoredData) -> bool:
        """Replace the job's payload, result and message with ``new`` when all three still
        equal ``old`` (a compare-and-set: a job that moved meanwhile keeps what it has);
        False when it changed or is gone. What ``conveyor jobs reencrypt`` writes: the same
        data sealed again with the newest key (docs/job-data.md)."""
        ...

    def retry_all(self, state: JobState = JobState.DEAD, queue: str | None = None) -> int:
        """Retry every job in ``state`` (dead by default)."""
        ...

    def clear(self, state: JobState = JobState.DEAD, queue: str | None = None) -> int:
        """Delete every job in a terminal ``state`` (dead by default)."""
        ...

    def pause_queue(self, queue: str) -> None:
        """Stop every worker from taking jobs from ``queue``."""
        ...

    def resume_queue(self, queue: str) -> None:
        """Undo ``pause_queue``."""
        ...

    def breakers(self) -> list[BreakerState]:
        """The breakers that hold jobs back (open, half-open) first, then closed ones with
        counted errors in their window (docs/operations.md, "Breakers")."""
        ...

    def close_breaker(self, key: str) -> bool:
        """Close breaker ``key`` by hand (its error log cleared; on a store that keeps one
        per queue, in every queue); True when it was open or half-open."""
        ...

    def schedules(self) -> list[ScheduleInfo]:
        """Every stored periodic schedule, by name."""
        ...

    def pause_schedule(self, name: str, by: str = "") -> bool:
        """Stop every worker from enqueueing ``name``'s ticks; False for an unknown name.
        Ticks that fall while paused are skipped, not caught up on resume. ``by`` names who
        did it in the audit trail (``schedule_changes``), as for every change below."""
        ...

    def resume_schedule(self, name: str, by: str = "") -> bool:
        """Undo ``pause_schedule`` (noting the time, so ticks of the paused period are not
        caught up later); False for an unknown name."""
        ...

    def add_schedule(self, info: ScheduleInfo, by: str) -> ScheduleInfo:
        """Store a schedule added at run time (``origin`` runtime) and return it as stored;
        ``ScheduleExists`` when the name is taken. The caller checked the definition."""
        ...

    def change_schedule(self, name: str, changes: Mapping[str, str], by: str) -> ScheduleInfo:
        """Change fields of a schedule's definition (``DEFINITION_FIELDS``); an edit of a
        declared schedule stands over the code's until ``reset_schedule`` or a new declaration
        (``save_schedules``). Returns the
        schedule as stored; ``ScheduleNotFound`` for an unknown name."""
        ...

    def reset_schedule(self, name: str, by: str) -> ScheduleInfo:
        """Put a declared schedule's code definition back in force; ``ValueError`` when no
        edit overrides it, ``ScheduleNotFound`` for an unknown name."""
        ...

    def remove_schedule(self, name: str, by: str) -> ScheduleInfo | None:
        """Remove a schedule; what it was, or None for an unknown name. A schedule the code
        still declares is written again by the next worker that starts."""
        ...

    def schedule_changes(self, name: str | None = None, limit: int = 50
                         ) -> list[ScheduleChange]:
        """The audit trail, newest first: every change of ``name`` (None: of every schedule),
        at most ``limit``; each store keeps the newest 1,000 changes."""
        ...

    def workers(self) -> list[WorkerInfo]:
        """Workers seen within the registry's time-to-live."""
        ...

    def command_worker(self, worker_id: str, command: str) -> bool:
        """Queue ``quiet`` or ``stop`` for a worker; it acts at its next heartbeat."""
        ...

    def get_batch(self, batch_id: str) -> BatchStatus | None:
        """Counters and timings of a batch, in O(1)."""
        ...

    def list_batches(self, offset: int = 0, limit: int = 50,
                     kind: str | None = None) -> list[BatchStatus]:
        """Batches (of one ``kind`` when given: "batch" or "workflow"), newest first."""
        ...

    def cancel_batch(self, batch_id: str) -> int:
        """Cancel every waiting job of a batch and request cancellation of its active ones."""
        ...

    def job_totals(self) -> list[JobTotals]:
        """All-time outcome counters per (queue, job name)."""
        ...

    def history(self, since: int = 0, queue: str | None = None) -> list[MinuteTotals]:
        """Outcomes per queue and minute, oldest first, for the minutes from ``since`` (a
        ``minute_of`` value) that are within the last ``HISTORY_MINUTES``; minutes without
        an outcome are left out. Older minutes are not reported, and ``trim`` removes them."""
        ...

    def workflow_graph(self, workflow_id: str, limit: int = 2000) -> list[GraphNode]:
        """Up to ``limit`` nodes of a workflow (in id order) with their state and parents,
        for drawing its graph; empty for an unknown id or a batch that is not a workflow."""
        ...
