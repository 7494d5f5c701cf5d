"""The job vocabulary shared by client, storage and worker: states, events, specs and records.

These are plain data: no I/O, no backend types. Storage backends receive ``JobSpec`` and
``Ack`` values and hand back ``LeasedJob`` and ``JobRecord`` values.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from conveyor.text import storable


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

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        """True for states a job never leaves by itself."""
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED}
)
ALL_STATES: tuple[JobState, ...] = tuple(JobState)


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
class FlowControl:
    """Optional flow-control settings of a job, enforced atomically by the storage."""

    unique_key: str | None = None
    unique_for: float | None = None
    concurrency_key: str | None = None
    concurrency_limit: int = 0
    rate_key: str | None = None
    rate_limit: int = 0
    rate_period: float = 0.0
    order_key: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """Dict with only the settings in use."""
        values = {k: getattr(self, k) for k in self.__slots__}
        return {k: v for k, v in values.items() if v not in (None, 0, 0.0)}

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any] | None) -> FlowControl | None:
        """Inverse of ``to_wire``; ``None`` when nothing is set."""
        if not raw:
            return None
        return cls(**{k: raw[k] for k in cls.__slots__ if k in raw})


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


class Outcome(str, Enum):
    """How an execution ended, as reported in an ``Ack``."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY = "retry"
    DEAD = "dead"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

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
    #: or ``None`` for a sound record. An unreadable record is still listed, with the fields
    #: that could be read and the rest defaulted, so that operators can see and delete it;
    #: the worker never runs it (it ends ``dead`` with this reason).
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
            "id": self.id,
            "name": self.name,
            "queue": self.queue,
            "state": self.state.value,
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

    def __post_init__(self) -> None:
        if self.description is not None:  # human text: see text.py
            object.__setattr__(self, "description", storable(self.description))


BATCH_CALLBACK_EVENTS = ("complete", "success", "death")


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
            "counts": {s.value: self.counts.get(s.value, 0) for s in ALL_STATES},
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
class HeartbeatReply:
    """What a heartbeat learns: leases it no longer holds, cancellations, a remote command."""

    lost: frozenset[str] = frozenset()
    cancel: frozenset[str] = frozenset()
    command: str | None = None  # "quiet" | "stop"


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A periodic schedule as the storage keeps it: what it enqueues, whether an operator
    paused it (and when it was last resumed), the last tick a worker enqueued and when it was
    first saved (epoch seconds)."""

    name: str
    cron: str
    tz: str
    job_name: str
    queue: str
    paused: bool = False
    last_tick: float | None = None
    resumed_at: float | None = None
    #: When the storage first saw the schedule (None for schedules stored before conveyor
    #: recorded it): no tick from before it is ever enqueued, so a new schedule never
    #: "catches up" ticks from before it existed.
    created_at: float | None = None

    def definition(self) -> dict[str, str]:
        """The fields a worker writes (the rest belongs to operators and the ticks)."""
        return {"name": self.name, "cron": self.cron, "tz": self.tz, "job_name": self.job_name,
                "queue": self.queue}


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


class _IdClock:
    """State of ``new_id``: the last millisecond and random part this process handed out."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ms = 0
        self.rand = 0

    def reseed(self) -> None:
        # A forked child must not continue the parent's sequence: both would make the same ids.
        self.lock = threading.Lock()
        self.ms = 0


_ids = _IdClock()
os.register_at_fork(after_in_child=_ids.reseed)
_RAND_MAX = (1 << 48) - 1


def new_id() -> str:
    """A 24-character, time-ordered, random job or batch id (48-bit ms time + 48 random bits).

    Monotonic within a process, like a monotonic ULID: in the same millisecond (or when the
    clock steps back) the random part counts up from the last one, so ids sort in the order
    they were made and a batch's jobs page in enqueue order by id alone.
    """
    ms = int(time.time() * 1000)
    with _ids.lock:
        if ms > _ids.ms:
            _ids.ms, _ids.rand = ms, int.from_bytes(os.urandom(6), "big") >> 1
        elif _ids.rand < _RAND_MAX:
            _ids.rand += 1
        else:
            _ids.ms, _ids.rand = _ids.ms + 1, 0
        return f"{_ids.ms:012x}{_ids.rand:012x}"
