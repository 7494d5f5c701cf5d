"""A durable job's records as every store keeps them (docs/durable.md): its steps, what it
waits for, and the messages sent to it.

Plain data, no I/O. A ``Step`` is stored as one JSON text per (job, step name); its
``result`` is the serializer's JSON text, kept as a string inside the record so that no
store ever decodes or re-encodes a job's data (Redis' Lua would change its numbers).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from conveyor.core.envelope import ENCRYPTED, RESULT_TAG, parse_result
from conveyor.core.job import Event, EventKind
from conveyor.core.text import storable

__all__ = ["EVENT", "FOREVER", "MESSAGE", "DurableHistory", "Message", "Received", "Step",
           "StepStatus", "Wait", "step_event"]

#: The ``until`` of a wait with no timeout (9999-12-31): a finite time every store can index.
FOREVER = 253402300799.0
#: ``Wait.kind`` and ``Message.kind``: an event by name and key (``app.send_event``), or a
#: message to one job by its id and a topic (``app.send``).
EVENT, MESSAGE = "event", "message"
#: How much of a result a step's event and the job page show.
SUMMARY_CHARS = 120


class StepStatus:
    """``Step.status``: final records are never replaced; the others are, by their job."""

    OK = "ok"  # final: the step returned ``result`` (a wait: what it received, or null)
    ERROR = "error"  # final: the step failed past its own retries; ``error`` says why
    RETRYING = "retrying"  # a try failed; the next runs at ``until`` (``tries`` so far)
    CURSOR = "cursor"  # a loop's checkpoint (``ctx.iterate``): ``result`` is the cursor

    FINAL = frozenset({OK, ERROR})


@dataclass(frozen=True, slots=True)
class Step:
    """One recorded step of a job (or a loop's checkpoint, a wait's outcome)."""

    name: str
    status: str = StepStatus.OK
    result: str | None = None  # JSON text
    error: Mapping[str, str] | None = None  # {"type", "message"}
    started: float = 0.0
    ended: float = 0.0
    attempt: int = 0  # the job's attempt that recorded it
    tries: int = 0  # the step's own tries so far (its retry policy)
    until: float | None = None  # RETRYING: when the next try runs; a sleep: its wake time
    origin: str | None = None  # the message a wait received (each is received once)

    @property
    def final(self) -> bool:
        """True once the step ended for good: a later save of the same name is ignored."""
        return self.status in StepStatus.FINAL

    def to_json(self) -> str:
        """The stored text (short keys, empty fields left out)."""
        out: dict[str, Any] = {"n": self.name, "s": self.status, "t0": self.started,
                               "t1": self.ended}
        for key, value in (("r", self.result), ("e", self.error), ("a", self.attempt),
                           ("k", self.tries), ("u", self.until), ("o", self.origin)):
            if value:
                out[key] = dict(value) if isinstance(value, Mapping) else value
        return json.dumps(out, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, name: str = "?") -> Step:
        """Inverse of ``to_json``. A damaged record reads as a failed step naming the damage,
        so the job ends with that reason instead of running the step again."""
        try:
            raw = json.loads(text)
            error = raw.get("e")
            return cls(name=str(raw["n"]), status=str(raw["s"]), result=raw.get("r"),
                       error=None if error is None else {str(k): str(v)
                                                         for k, v in error.items()},
                       started=float(raw.get("t0", 0.0)), ended=float(raw.get("t1", 0.0)),
                       attempt=int(raw.get("a", 0)), tries=int(raw.get("k", 0)),
                       until=None if raw.get("u") is None else float(raw["u"]),
                       origin=raw.get("o"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            shown = text[:80] if isinstance(text, str) else repr(text[:80])
            return cls(name=name, status=StepStatus.ERROR, error={
                "type": "conveyor.errors.PayloadError",
                "message": f"unreadable step record ({type(exc).__name__}): {shown}"})

    def summary(self) -> str:
        """One line for the event log, the CLI and the job page."""
        if self.status == StepStatus.ERROR and self.error:
            return f"{self.error.get('type', 'Error')}: {self.error.get('message', '')}"
        if self.status == StepStatus.RETRYING:
            why = self.error.get("message", "") if self.error else ""
            return f"try {self.tries} failed ({why}); next at {self.until}"
        if self.result is None and self.until is not None:  # a sleep: its wake time
            return "until " + datetime.fromtimestamp(self.until, timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S UTC")
        text = "null" if self.result is None else self.result
        hidden = _hidden(text)
        if hidden is not None:
            return hidden
        return storable(text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + "…")

    def as_dict(self) -> dict[str, Any]:
        """JSON view for the CLI's ``--json`` and the web API."""
        return {"name": self.name, "status": self.status, "started": self.started,
                "ended": self.ended, "duration": max(self.ended - self.started, 0.0),
                "attempt": self.attempt, "tries": self.tries, "until": self.until,
                "summary": self.summary()}


def _hidden(text: str) -> str | None:
    """What a summary shows for a value sealed or kept by reference (docs/job-data.md):
    ``encrypted``, or its size; None for a value in clear."""
    if not text.startswith('{"' + RESULT_TAG):
        return None
    try:
        _, env = parse_result(text)
    except ValueError:
        return None
    if env is None:
        return None
    if "e" in env:
        return ENCRYPTED
    return f"by reference, {env.get('z', 0):,} bytes"


def step_event(step: Step, worker: str | None = None) -> Event:
    """The ``step`` event a store appends to the job's log with the record."""
    return Event(ts=step.ended, kind=EventKind.STEP, message=f"step {step.name}: {step.status}",
                 worker=worker, attempt=step.attempt,
                 data={"name": step.name, "status": step.status,
                       "duration": round(max(step.ended - step.started, 0.0), 6),
                       "summary": step.summary()})


@dataclass(frozen=True, slots=True)
class Wait:
    """What a job waits for (one at a time): an event (``name``, ``key``) or a message to it
    (``name`` is the topic). ``step`` is the record its outcome becomes; ``until`` its
    timeout; ``window``: events sent up to this many seconds before the wait began count
    too (the job type's ``event_window``). ``since`` is when the store registered it."""

    kind: str
    step: str
    name: str
    key: str = ""
    until: float = FOREVER
    window: float = 0.0
    since: float = 0.0

    def to_json(self) -> str:
        """The stored text."""
        return json.dumps({"kind": self.kind, "step": self.step, "name": self.name,
                           "key": self.key, "until": self.until, "window": self.window,
                           "since": self.since}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Wait | None:
        """Inverse of ``to_json``; None for a damaged record (the job then waits for
        nothing: its timeout or a cancel ends the wait)."""
        try:
            raw = json.loads(text)
            return cls(kind=str(raw["kind"]), step=str(raw["step"]), name=str(raw["name"]),
                       key=str(raw.get("key", "")), until=float(raw["until"]),
                       window=float(raw.get("window", 0.0)), since=float(raw.get("since", 0.0)))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self, when: Callable[[float], str] = str) -> str:
        """What the job's message says while it waits (``when`` formats its timeout)."""
        what = (f"event {self.name!r} key {self.key!r}" if self.kind == EVENT
                else f"message {self.name!r}")
        return f"waiting for {what}" + ("" if self.until >= FOREVER else
                                        f" until {when(self.until)}")

    def as_dict(self) -> dict[str, Any]:
        """JSON view (``explain``, the CLI, the web API)."""
        return {"kind": self.kind, "step": self.step, "name": self.name, "key": self.key,
                "until": None if self.until >= FOREVER else self.until, "since": self.since}


@dataclass(frozen=True, slots=True)
class Message:
    """A message in a job's inbox: sent to it by id, or an event delivered to its wait."""

    id: str
    kind: str
    name: str
    key: str
    data: str  # JSON text
    sent_at: float

    def matches(self, wait: Wait) -> bool:
        """True when ``wait`` receives this message."""
        return (self.kind, self.name, self.key) == (wait.kind, wait.name, wait.key)


@dataclass(frozen=True, slots=True)
class Received:
    """A store's answer to a wait: ``done`` with ``data`` (JSON text; None when it timed
    out), or not yet, the job to sleep until ``until``."""

    done: bool
    data: str | None = None
    until: float = FOREVER


@dataclass(slots=True)
class DurableHistory:
    """A job's durable records as the inspector reads them: its steps in the order first
    recorded, what it waits for, and how many messages wait in its inbox."""

    steps: list[Step] = field(default_factory=list)
    wait: Wait | None = None
    inbox: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON view for the CLI and the web API."""
        return {"steps": [s.as_dict() for s in self.steps],
                "wait": None if self.wait is None else self.wait.as_dict(),
                "inbox": self.inbox}
