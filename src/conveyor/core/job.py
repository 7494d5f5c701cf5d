"""The job vocabulary shared by client, storage and worker: states, events, specs and records.

These are plain data: no I/O, no backend types. Storage backends receive ``JobSpec`` and
``Ack`` values and hand back ``LeasedJob`` and ``JobRecord`` values. What the storage reports
beside a job's lifecycle (batches, workers, schedules, queues) is in the storage package, a
module per record (``storage/batch_records.py``, ``workers.py``, …); ids are made by ``ids.py``.
A job's history (``Event``) is in ``events.py``, an execution's acknowledgement (``Ack``,
``Outcome``) in ``ack.py``: both are re-exported here, where the whole vocabulary is imported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

# Re-exported: an execution's ack and a job's events are part of the job vocabulary.
from conveyor.core.ack import Ack as Ack
from conveyor.core.ack import ErrorInfo as ErrorInfo
from conveyor.core.ack import Outcome as Outcome
from conveyor.core.events import Event as Event
from conveyor.core.events import EventKind as EventKind
from conveyor.core.events import decode_events as decode_events

# Re-exported: a spec's flow control and node are part of the job vocabulary.
from conveyor.core.flow_control import FlowControl as FlowControl
from conveyor.core.node import Node as Node
from conveyor.core.text import storable


class JobState(str, Enum):
    """Where a job is in its lifecycle (DESIGN §2)."""

    SCHEDULED = "scheduled"
    PENDING = "pending"
    ACTIVE = "active"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    #: A workflow node whose parents have not all settled (docs/workflows.md). Last in the
    #: enum: a state's position is stored by some backends (Redis batch pages).
    WAITING = "waiting"
    #: A member of an aggregation waiting for its aggregation's run (docs/aggregation.md).
    #: After ``WAITING``, for the same reason.
    AGGREGATING = "aggregating"

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        """True for states a job never leaves by itself."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD,
                             JobState.CANCELLED})
ALL_STATES: tuple[JobState, ...] = tuple(JobState)
#: The states in the order a job passes through them, for display (CLI, web, metrics).
SHOWN_STATES: tuple[JobState, ...] = (
    JobState.WAITING, JobState.SCHEDULED, JobState.AGGREGATING, JobState.PENDING,
    JobState.ACTIVE, JobState.RETRYING, JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD,
    JobState.CANCELLED,
)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job to store, as the client hands it to ``Storage.enqueue``.

    ``payload`` is the JSON text of ``{"a": args, "k": kwargs, "m": meta}``, encoded once by
    the client; backends store it as opaque text.
    """

    id: str
    name: str
    queue: str
    payload: str
    max_retries: int = 25
    timeout: float | None = None
    deadline: float | None = None
    run_at: float | None = None
    batch_id: str | None = None
    flow: FlowControl | None = None
    #: Set for a job of a workflow; a node with parents is stored ``waiting``.
    node: Node | None = None

    @property
    def waits(self) -> bool:
        """True when the job is stored ``waiting`` for its parents."""
        return self.node is not None and bool(self.node.parents)


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What became of one ``JobSpec``: its id, and False when a unique job already existed."""

    id: str
    created: bool = True


@dataclass(slots=True)
class LeasedJob:
    """A job a worker holds under a lease, as returned by ``Storage.dequeue``."""

    id: str
    name: str
    queue: str
    payload: str
    token: str
    attempt: int
    errors: int
    max_retries: int
    timeout: float | None
    batch_id: str | None
    recoveries: int = 0
    #: Why the stored record could not be decoded (``None`` when it could). The storage
    #: still leases such a job, alone, so that the worker acknowledges it ``dead`` with this
    #: reason under the lease's fence; the jobs fetched with it are unaffected.
    unreadable: str | None = None
    cost: int = 1  #: the worker slots it takes while it runs (``FlowControl.cost``)


@dataclass(slots=True)
class JobRecord:
    """Everything stored about a job, as the ``Inspector`` reads it."""

    id: str
    name: str
    queue: str
    payload: str
    state: JobState
    attempt: int = 0
    errors: int = 0
    recoveries: int = 0
    max_retries: int = 25
    timeout: float | None = None
    deadline: float | None = None
    created_at: float = 0.0
    run_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    batch_id: str | None = None
    worker: str | None = None
    lease_expires_at: float | None = None
    cancel_requested: bool = False
    result: str | None = None
    message: str | None = None
    progress: tuple[int, int] | None = None
    flow: FlowControl | None = None
    events: list[Event] | None = None
    #: Why the stored record could not be read whole (truncated, not UTF-8, a field missing),
    #: or ``None`` for a sound record. It is still listed (what could be read, the rest
    #: defaulted) for operators to delete; no worker runs it (it ends ``dead``, this reason).
    unreadable: str | None = None

    @property
    def args(self) -> list[Any]:
        """Positional arguments decoded from the payload (empty if it cannot be decoded)."""
        return list(_payload_part(self.payload, "a", []))

    @property
    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments decoded from the payload."""
        return dict(_payload_part(self.payload, "k", {}))

    def as_dict(self, *, with_events: bool = True) -> dict[str, Any]:
        """JSON-ready view for the CLI's ``--json`` and the web API."""
        out: dict[str, Any] = {
            "id": self.id, "name": self.name,
            "queue": self.queue, "state": self.state.value,
            "args": self.args,
            "kwargs": self.kwargs,
            "attempt": self.attempt,
            "errors": self.errors,
            "recoveries": self.recoveries,
            "max_retries": self.max_retries,
            "timeout": self.timeout,
            "deadline": self.deadline,
            "created_at": self.created_at,
            "run_at": self.run_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "batch_id": self.batch_id,
            "worker": self.worker,
            "cancel_requested": self.cancel_requested,
            "result": _json_or_none(self.result),
            "message": self.message,
            "progress": list(self.progress) if self.progress else None,
            "unreadable": self.unreadable,
        }
        if with_events and self.events is not None:
            out["events"] = [e.as_dict() for e in self.events]
        return out


def _json_or_none(text: str | None) -> Any:
    # A stored value another client wrote may not be JSON, or be nested past the stack.
    try:
        return json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None


def _payload_part(payload: str, key: str, default: Any) -> Any:
    data = _json_or_none(payload)
    return data.get(key, default) if isinstance(data, dict) else default


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """A batch to create. ``callbacks`` maps ``complete``/``success``/``death`` to the job
    the storage enqueues, exactly once, when that moment comes."""

    id: str
    description: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    callbacks: Mapping[str, JobSpec] = field(default_factory=dict)
    #: "batch", or "workflow" for the batch holding a workflow's jobs (listed apart).
    kind: str = "batch"

    def __post_init__(self) -> None:
        if self.description is not None:  # human text: see text.py
            object.__setattr__(self, "description", storable(self.description))


BATCH_CALLBACK_EVENTS = ("complete", "success", "death")


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """What a heartbeat learns: leases it no longer holds, cancellations, a remote command."""

    lost: frozenset[str] = frozenset()
    cancel: frozenset[str] = frozenset()
    command: str | None = None  # "quiet" | "stop"
