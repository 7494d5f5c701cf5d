"""Record shapes the storage reports that are not a job's lifecycle: batches, workers,
schedules, queues, outcome totals, and the retention policy ``Storage.trim`` applies.

Plain data like ``conveyor.core.job``: no I/O, no backend types. Every backend builds these; the
inspector views, CLI, web UI and metrics read them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from conveyor.core.job import (
    SHOWN_STATES,
    TERMINAL_STATES,
    EnqueueResult,
    FlowControl,
    JobSpec,
    JobState,
)
from conveyor.storage.schedule_records import ScheduleChange as ScheduleChange
from conveyor.storage.schedule_records import ScheduleInfo as ScheduleInfo


@dataclass(frozen=True, slots=True)
class JobBlock:
    """Many jobs of one name and queue with the same options, as columns: what the client's
    bulk path hands to ``Storage.enqueue_block``.

    Job ``i`` has the id ``ids[i]``, the payload ``payloads[i]`` and, when ``flows`` is given,
    the flow control ``flows[i]``; every other field is shared. It stands for exactly the
    ``JobSpec``s of ``specs()``, in that order.
    """

    name: str
    queue: str
    ids: Sequence[str]
    payloads: Sequence[str]
    max_retries: int = 25
    timeout: float | None = None
    deadline: float | None = None
    run_at: float | None = None
    batch_id: str | None = None
    flows: Sequence[FlowControl | None] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def specs(self) -> list[JobSpec]:
        """The block's jobs one by one."""
        flows = self.flows if self.flows is not None else [None] * len(self.ids)
        return [
            JobSpec(id=job_id, name=self.name, queue=self.queue, payload=payload,
                    max_retries=self.max_retries, timeout=self.timeout, deadline=self.deadline,
                    run_at=self.run_at, batch_id=self.batch_id, flow=flow)
            for job_id, payload, flow in zip(self.ids, self.payloads, flows, strict=True)
        ]


class BlockResults(Sequence[EnqueueResult]):
    """What became of a block's jobs, as a storage reports it in one string: job ``i`` is
    ``ids[i]``, created when ``codes[i]`` is "1". An ``EnqueueResult`` is made only for the
    jobs read one by one; the client's bulk path reads ``ids`` and ``all_created`` instead.
    """

    __slots__ = ("codes", "ids")

    def __init__(self, ids: Sequence[str], codes: str) -> None:
        if len(codes) != len(ids):
            raise ValueError(f"{len(codes)} result codes for {len(ids)} jobs")
        self.ids = ids
        self.codes = codes

    @property
    def all_created(self) -> bool:
        """Whether every job of the block was created (none existed already)."""
        return "0" not in self.codes

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> EnqueueResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[EnqueueResult]: ...

    def __getitem__(self, index: int | slice) -> EnqueueResult | list[EnqueueResult]:
        if isinstance(index, slice):
            return [EnqueueResult(i, c == "1")
                    for i, c in zip(self.ids[index], self.codes[index], strict=True)]
        return EnqueueResult(self.ids[index], self.codes[index] == "1")


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished work is kept before ``Storage.trim`` removes it."""

    succeeded_seconds: float = 7 * 24 * 3600.0
    failed_seconds: float = 180 * 24 * 3600.0
    dead_seconds: float = 180 * 24 * 3600.0
    dead_max: int = 10_000
    batch_seconds: float = 7 * 24 * 3600.0
    worker_ttl: float = 60.0


@dataclass(frozen=True, slots=True)
class StoredData:
    """A job's data as stored (``Inspector.reseal``): its payload, result and last message,
    each compared and replaced as the store holds it."""

    payload: str
    result: str | None
    message: str | None


@dataclass(frozen=True, slots=True)
class JobTotals:
    """All-time outcome counters for one (queue, job name), for metrics."""

    queue: str
    name: str
    processed: int
    failed: int
    dead: int
    retried: int


# Per-minute outcome counters are kept this long: one day of minutes, the overview's history.
HISTORY_MINUTES = 1440


def minute_of(ts: float) -> int:
    """The minute a storage timestamp falls in, counted from the epoch (UTC)."""
    return int(ts // 60)


def today_start(now: float) -> int:
    """The first minute of ``now``'s UTC day: "today" counts are the history's minutes from
    there (a day of minutes is always kept, so today's are all there)."""
    return int(now // 86400) * 1440


def history_start(now: float, since: int = 0) -> int:
    """The first minute ``Inspector.history`` reports at ``now``: ``since``, but no earlier
    than the oldest minute of the last ``HISTORY_MINUTES`` (the current one included)."""
    return max(since, minute_of(now) - HISTORY_MINUTES + 1)


@dataclass(frozen=True, slots=True)
class MinuteTotals:
    """Outcomes of one queue in one minute (``Inspector.history``)."""

    queue: str
    minute: int  # minutes since the epoch: the minute starts at ``minute * 60``
    processed: int  # succeeded
    failed: int  # failed (a business rule said no)
    dead: int  # died (retries exhausted, killed, recovered too often, unreadable)
    retried: int  # errors that will run again


@dataclass(slots=True)
class BatchStatus:
    """Live counters and timings of a batch, read in O(1) by ``Inspector.get_batch``."""

    id: str
    description: str | None
    meta: dict[str, Any]
    created_at: float
    total: int
    counts: dict[str, int]
    closed: bool = False
    cancelled: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    callbacks_fired: tuple[str, ...] = ()
    #: "batch", or "workflow" (the batch of a workflow's jobs).
    kind: str = "batch"

    @property
    def done(self) -> int:
        """Jobs in a terminal state."""
        return sum(self.counts.get(s.value, 0) for s in TERMINAL_STATES)

    @property
    def complete(self) -> bool:
        """Closed, and every job reached a terminal state."""
        return self.closed and self.done >= self.total

    @property
    def percent(self) -> float:
        """Share of jobs in a terminal state, 0 to 100."""
        return 100.0 if self.total == 0 else round(100.0 * self.done / self.total, 2)

    def eta(self, now: float) -> float | None:
        """Seconds until done at the rate seen so far, or None when it cannot be told yet."""
        if self.complete or not self.started_at or self.done == 0:
            return None
        rate = self.done / max(now - self.started_at, 1e-6)
        return (self.total - self.done) / rate

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """JSON-ready view: counts per state, total, percent, timings, ETA."""
        now = time.time() if now is None else now
        end = self.finished_at or now
        return {
            "id": self.id,
            "description": self.description,
            "meta": self.meta,
            "total": self.total,
            "counts": {s.value: self.counts.get(s.value, 0) for s in SHOWN_STATES},
            "done": self.done,
            "percent": self.percent,
            "closed": self.closed,
            "complete": self.complete,
            "cancelled": self.cancelled,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "elapsed": (end - self.started_at) if self.started_at else None,
            "eta": self.eta(now),
            "callbacks_fired": list(self.callbacks_fired),
            "kind": self.kind,
        }


@dataclass(frozen=True, slots=True)
class BusySlot:
    """What one busy processor slot of a worker runs, and since when."""

    job_id: str
    name: str
    queue: str
    started_at: float


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker process as it reports itself in each heartbeat."""

    id: str
    hostname: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: float
    status: str = "running"  # running | quiet | stopping
    busy: tuple[BusySlot, ...] = ()
    last_seen: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        """Dict form stored in the worker registry."""
        return {
            "id": self.id,
            "hostname": self.hostname,
            "pid": self.pid,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "started_at": self.started_at,
            "status": self.status,
            "busy": [[b.job_id, b.name, b.queue, b.started_at] for b in self.busy],
            "last_seen": self.last_seen,
        }

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> WorkerInfo:
        """Inverse of ``to_wire``."""
        return cls(
            id=raw["id"],
            hostname=raw["hostname"],
            pid=int(raw["pid"]),
            queues=tuple(raw["queues"]),
            concurrency=int(raw["concurrency"]),
            started_at=float(raw["started_at"]),
            status=raw.get("status", "running"),
            busy=tuple(BusySlot(b[0], b[1], b[2], float(b[3])) for b in raw.get("busy", [])),
            last_seen=float(raw.get("last_seen", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One node of a workflow's graph as the dashboard draws it (``Inspector.workflow_graph``)."""

    id: str
    name: str
    state: JobState
    parents: tuple[str, ...] = ()


#: Characters of a job's payload text and of its message that a search reads
#: (``Inspector.job_heads``): enough for ids, names and short values, whatever the job holds.
HEAD_CHARS = 2048


@dataclass(frozen=True, slots=True)
class JobHead:
    """What a search reads of a job (``Inspector.job_heads``): its identity and state, and the
    first ``HEAD_CHARS`` characters of its payload text (``{"a": args, "k": kwargs, ...}``
    as stored) and of its last message. Bounded whatever the job holds."""

    id: str
    name: str
    queue: str
    state: JobState | None  # None: a damaged record whose state cannot be read
    created_at: float
    payload: str
    message: str


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue as the ``Inspector`` reports it."""

    name: str
    pending: int
    scheduled: int
    active: int
    retrying: int
    latency: float  # age in seconds of the oldest pending job; 0 when empty
    paused: bool
    processed: int  # succeeded, all time
    failed: int  # failed + dead outcomes, all time
    dead: int  # currently in the dead set
    processed_today: int = 0
    failed_today: int = 0
    waiting: int = 0  # workflow nodes waiting for their parents
    aggregating: int = 0  # members waiting for their aggregation group's run


def spec_to_wire(spec: JobSpec) -> dict[str, Any]:
    """A job not enqueued yet (a batch's callback) as backends store it until it fires."""
    return {
        "id": spec.id, "name": spec.name, "queue": spec.queue, "payload": spec.payload,
        "max_retries": spec.max_retries, "timeout": spec.timeout, "deadline": spec.deadline,
        "run_at": spec.run_at, "batch_id": spec.batch_id,
        "flow": spec.flow.to_wire() if spec.flow else None,
    }


def spec_from_wire(raw: Mapping[str, Any]) -> JobSpec:
    """Inverse of ``spec_to_wire``."""
    return JobSpec(
        id=raw["id"], name=raw["name"], queue=raw["queue"], payload=raw["payload"],
        max_retries=int(raw.get("max_retries", 25)), timeout=raw.get("timeout"),
        deadline=raw.get("deadline"), run_at=raw.get("run_at"), batch_id=raw.get("batch_id"),
        flow=FlowControl.from_wire(raw.get("flow")),
    )
