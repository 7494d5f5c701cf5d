"""Durable jobs at the storage boundary (docs/durable.md): ``DurableStore``, the part of
every backend that keeps a job's steps, its wait, its inbox and the events kept for late
waiters, and the rules the backends written in Python share (memory, SQLite; PostgreSQL's
functions and Redis' scripts spell the same).

Every method is one atomic step, like the hot path's. Those a running job calls are fenced
by its lease token, as an ack is: a zombie (a worker whose lease was taken over) never
records a step or takes a message. A sleeping or waiting job is ``scheduled`` (the ack's
``SUSPENDED`` outcome puts it there, ``resume_at`` its wake time), so everything that
reads, promotes, cancels or counts scheduled jobs treats it the same on every backend.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Protocol, runtime_checkable

from conveyor.core.job import Event, EventKind
from conveyor.core.steps import (
    EVENT,
    DurableHistory,
    Message,
    Received,
    Step,
    StepStatus,
    Wait,
    step_event,
)

__all__ = ["WOKEN_MESSAGE", "DurableStore", "kept_pick", "merge", "outcome_of", "received",
           "step_events", "step_lines", "woken_event"]

#: ``message`` of a suspended job whose wait was answered while it was leaving its worker.
WOKEN_MESSAGE = "woken: what it waited for arrived"


@runtime_checkable
class DurableStore(Protocol):
    """A backend's durable records (``Storage.durable``)."""

    def read(self, job_id: str) -> DurableHistory:
        """The job's steps in the order first recorded, its wait and its inbox size (empty
        for a job with none, or no such job)."""
        ...

    def save_steps(self, job_id: str, token: str, steps: Sequence[Step]) -> bool:
        """Record steps of the running job, fenced by its lease (False: refused, nothing
        written). A name recorded final already keeps its record (the first wins); any
        other record replaces the one of its name. Final and retrying records append a
        ``step`` event to the job's log in the same step."""
        ...

    def receive(self, job_id: str, token: str, wait: Wait) -> Received | None:
        """The running job's wait, in one fenced step (None: refused). Registers the wait (a
        wait of the same step keeps its first ``until`` and ``since``); then the oldest
        message of its inbox the wait matches — or for an event, the oldest kept event sent
        at most ``window`` seconds before the wait began and never received by this job —
        is taken: recorded as the step ``wait.step`` (its data the result), the wait
        removed, ``done``. Past ``until`` with nothing: recorded as null, ``done``.
        Otherwise not done: the job suspends until ``until``, and a delivery wakes it."""
        ...

    def send(self, job_id: str, message: Message) -> bool | None:
        """Put a message in a job's inbox (kept until received; a message id stored already
        is not stored again); a job suspended waiting for it is made pending in the same
        step. False when the job has finished (nothing kept), None when there is no such
        job."""
        ...

    def send_event(self, message: Message, keep: float) -> int:
        """Deliver an event to every job waiting for its name and key, each once, into its
        inbox, each suspended one made pending in the same step as its delivery; with
        ``keep`` > 0 the event is also kept that long for waits that begin later. Returns
        how many waits it reached."""
        ...


def step_events(steps: Iterable[Step]) -> list[Event]:
    """The events a save appends: one per final or retrying record (a cursor has none)."""
    return [step_event(s) for s in steps if s.status != StepStatus.CURSOR]


def step_lines(steps: Iterable[Step]) -> str:
    """``step_events`` as the NDJSON lines stores append."""
    return "".join(e.to_json() + "\n" for e in step_events(steps))


def merge(stored: Step | None, new: Step) -> Step:
    """The record a save leaves for one name: a final one stays."""
    return stored if stored is not None and stored.final else new


def outcome_of(wait: Wait, message: Message | None, now: float, attempt: int) -> Step:
    """The step a wait becomes: the message it took, or null at its timeout."""
    return Step(name=wait.step, status=StepStatus.OK,
                result=None if message is None else message.data, started=wait.since,
                ended=now, attempt=attempt, origin=None if message is None else message.id)


def kept_pick(kept: Iterable[Message], wait: Wait, taken: Collection[str]) -> Message | None:
    """The kept event an event wait receives: the oldest of its name and key sent within
    ``window`` seconds before the wait began, that this job never received."""
    if wait.kind != EVENT or wait.window <= 0:
        return None
    found = [m for m in kept if (m.name, m.key) == (wait.name, wait.key)
             and m.sent_at >= wait.since - wait.window and m.id not in taken]
    return min(found, key=lambda m: (m.sent_at, m.id)) if found else None


def woken_event(now: float, attempt: int) -> Event:
    """The event of a suspended job made pending by a delivery."""
    return Event(ts=now, kind=EventKind.WOKEN, state="pending", message=WOKEN_MESSAGE,
                 attempt=attempt)


def received(step: Step) -> Received:
    """A ``done`` answer carrying the step's result."""
    return Received(True, step.result, step.ended)
