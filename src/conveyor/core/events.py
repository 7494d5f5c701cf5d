"""A job's history: the events stored with it (state changes, its messages, errors), the
kinds they come in, and how a stored NDJSON log of them is read back.

Plain data, no I/O: backends append ``Event.to_json()`` lines and read them with
``decode_events``. Re-exported by ``core/job.py``, the job vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conveyor.core.text import storable


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
