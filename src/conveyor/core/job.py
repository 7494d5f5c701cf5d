"""The job vocabulary shared by client, storage and worker: states, events, specs and records.

These are plain data: no I/O, no backend types. Storage backends receive ``JobSpec`` and
``Ack`` values and hand back ``LeasedJob`` and ``JobRecord`` values. What the storage reports
beside a job's lifecycle (batches, workers, schedules, queues) is in the storage package, a
module per record (``storage/batch_records.py``, ``workers.py``, …); ids are made by ``ids.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

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


class EventKind:
    """The ``kind`` of an event in a job's history. Plain strings, stable on the wire."""

    ENQUEUED = "enqueued"
    SCHEDULED = "scheduled"
    STARTED = "started"
    MESSAGE = "message"
    PROGRESS = "progress"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ERROR = "error"  # an exception; data says whether a retry was scheduled
    DEAD = "dead"
    RECOVERED = "recovered"  # lease expired, put back; not an error attempt
    INTERRUPTED = "interrupted"  # hard shutdown put it back; not an error attempt
    CANCELLED = "cancelled"
    CANCEL_REQUESTED = "cancel_requested"
    EXPIRED = "expired"  # deadline passed before it could start
    RETRIED = "retried"  # retried by hand (CLI, web)
    KILLED = "killed"  # moved to dead by hand
    ACK_REFUSED = "ack_refused"  # a stale lease holder tried to acknowledge (fencing)
    RELEASED = "released"  # a workflow node's parents all settled: it is pending now
    REOPENED = "reopened"  # a parent was retried by hand: the node waits for it again
    FLUSHED = "flushed"  # its aggregation was due: it leads the aggregation's run
    # Durable jobs (docs/durable.md): a step recorded, left to sleep or wait, woken at once.
    STEP, SUSPENDED, WOKEN = "step", "suspended", "woken"
    SNOOZED = "snoozed"  # RetryAfter: due again at ts + data["retry_after"]; not an error
    BREAKER = "breaker"  # its breaker opened, closed or paused, or it was leased as the probe


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a job's history: a state change or a message the job wrote."""

    ts: float
    kind: str
    state: str | None = None
    message: str | None = None
    worker: str | None = None
    attempt: int = 0
    data: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # Human text is made storable where it is built, once, for every backend (text.py);
        # ``data`` is data and is stored as JSON, exactly.
        if self.message is not None and not self.message.isascii():
            object.__setattr__(self, "message", storable(self.message))

    def to_wire(self) -> dict[str, Any]:
        """Compact dict form stored by backends (short keys, ``None`` left out)."""
        out: dict[str, Any] = {"t": self.ts, "k": self.kind}
        if self.state is not None:
            out["s"] = self.state
        if self.message is not None:
            out["m"] = self.message
        if self.worker is not None:
            out["w"] = self.worker
        if self.attempt:
            out["a"] = self.attempt
        if self.data:
            out["d"] = dict(self.data)
        return out

    def to_json(self) -> str:
        """One line of the NDJSON event log that backends append to."""
        return json.dumps(self.to_wire(), separators=(",", ":"), default=str)

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> Event:
        """Inverse of ``to_wire``."""
        return cls(
            ts=float(raw["t"]),
            kind=str(raw["k"]),
            state=raw.get("s"),
            message=raw.get("m"),
            worker=raw.get("w"),
            attempt=int(raw.get("a", 0)),
            data=raw.get("d"),
        )

    def as_dict(self) -> dict[str, Any]:
        """Readable dict for JSON output (CLI ``--json``, web API)."""
        return {
            "ts": self.ts,
            "kind": self.kind,
            "state": self.state,
            "message": self.message,
            "worker": self.worker,
            "attempt": self.attempt,
            "data": dict(self.data) if self.data else None,
        }


def decode_events(log: str | None) -> list[Event]:
    """Parse a stored NDJSON event log; a damaged line becomes a visible event, not a crash."""
    events: list[Event] = []
    # "\n" only: splitlines() would also split at U+2028, U+0085 and others, which JSON
    # encoders (Lua's cjson, SQLite's json_object) leave unescaped inside strings.
    for line in (log or "").split("\n"):
        if not line:
            continue
        try:
            events.append(Event.from_wire(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            events.append(
                Event(ts=0.0, kind=EventKind.MESSAGE, message=f"unreadable event: {line[:200]}")
            )
    return events


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


class Outcome(str, Enum):
    """How an execution ended, as reported in an ``Ack``."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY = "retry"
    DEAD = "dead"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    SUSPENDED = "suspended"  # a durable job sleeps or waits: scheduled until ``resume_at``
    SNOOZE = "snooze"  # RetryAfter: scheduled again in retry_in s, the errors untouched

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An exception as stored: type, message and traceback text."""

    type: str
    message: str
    traceback: str = ""

    def __post_init__(self) -> None:
        for name in ("type", "message", "traceback"):  # human text: see text.py
            value = getattr(self, name)
            if not value.isascii():
                object.__setattr__(self, name, storable(value))

    def to_wire(self) -> dict[str, str]:
        """Dict stored in the error event's data."""
        return {"type": self.type, "message": self.message, "traceback": self.traceback}


@dataclass(frozen=True, slots=True)
class Ack:
    """A worker's acknowledgement of one execution, fenced by the lease ``token``.

    ``events`` are the job's own buffered messages, stored before the final event.
    """

    job_id: str
    token: str
    outcome: Outcome
    result: str | None = None
    message: str | None = None
    error: ErrorInfo | None = None
    retry_in: float | None = None
    events: tuple[Event, ...] = ()
    progress: tuple[int, int] | None = None
    bundle: tuple[Ack, ...] = ()  # the other members' acks of an aggregated run it leads
    resume_at: float | None = None  # SUSPENDED: when it runs again (the storage's clock)
    ran: bool = True  # False: never ran (unreadable, unknown): no breaker counts it

    def flatten(self) -> list[Ack]:
        """This ack and its bundle, each to be written as an ack of its own."""
        return [replace(self, bundle=()), *self.bundle] if self.bundle else [self]

    def __post_init__(self) -> None:
        # The message is human text (text.py); ``result`` is JSON the serializer made storable.
        if self.message is not None and not self.message.isascii():
            object.__setattr__(self, "message", storable(self.message))


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
