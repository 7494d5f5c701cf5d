"""Acknowledgements on the memory backend: an outcome applied to its job under the lease's
fence (``Storage.ack``; the caller holds the store's lock)."""

from __future__ import annotations

from typing import Any

from conveyor.core.job import Ack, Event, EventKind, FlowControl, JobRecord, JobState, Outcome
from conveyor.storage.breakers import after_ack, breaker_touch
from conveyor.storage.memory.durable import MemoryDurable
from conveyor.storage.memory.entry import Entry
from conveyor.storage.memory.state import MemoryState
from conveyor.storage.rules import (
    ack_message,
    cancelled_message,
    counts_as_error,
    effective_outcome,
)


def apply(state: MemoryState, durable: MemoryDurable, ack: Ack, now: float) -> bool:
    """Apply one outcome if ``ack.token`` is the job's lease; else record the refusal
    (``durable``: the part a SUSPENDED outcome goes to)."""
    entry = state.holder(ack.job_id, ack.token)
    if entry is None:
        stale = state.jobs.get(ack.job_id)
        if stale is not None:
            assert stale.rec.events is not None
            stale.rec.events.append(Event(
                ts=now, kind=EventKind.ACK_REFUSED, state=stale.rec.state.value,
                message="acknowledgement refused: this worker no longer holds the lease",
                attempt=stale.rec.attempt, data={"outcome": ack.outcome.value}))
        return False
    rec = entry.rec
    assert rec.events is not None
    rec.events.extend(ack.events)
    if ack.progress is not None:
        rec.progress = ack.progress
    error = ack.error.to_wire() if ack.error else None
    message = ack_message(ack)
    outcome = effective_outcome(ack.outcome, rec.cancel_requested)
    if outcome is not ack.outcome:
        rec.errors += 1 if counts_as_error(ack) else 0
        message = cancelled_message(message)
    rec.message = message
    _finish(state, durable, entry, ack, outcome, now, message, error)
    flow = rec.flow
    if flow is not None and flow.breaker_key:
        _breaker(state, rec, flow, ack, outcome, now)
    return True


def _breaker(state: MemoryState, rec: JobRecord, flow: FlowControl, ack: Ack,
             outcome: Outcome, now: float) -> None:
    """The acknowledgement's effect on the job's breaker (storage/breakers.py)."""
    touch = breaker_touch(ack, outcome)
    key = flow.breaker_key
    if touch is None or key is None:
        return
    book = state.flow.breakers
    row, message = after_ack(book.get(key), key, flow, touch, rec.id, now, ack)
    if row is None:
        book.pop(key, None)
    else:
        book[key] = row
    if message is not None:
        assert rec.events is not None
        rec.events.append(Event(ts=now, kind=EventKind.BREAKER, state=rec.state.value,
                                message=message, attempt=rec.attempt))


def _finish(state: MemoryState, durable: MemoryDurable, entry: Entry, ack: Ack,
            outcome: Outcome, now: float, message: str | None,
            error: dict[str, Any] | None) -> None:
    rec, worker = entry.rec, entry.rec.worker
    if outcome is Outcome.SUCCEEDED:
        rec.result = ack.result
        state.move(entry, JobState.SUCCEEDED, EventKind.SUCCEEDED, now, worker=worker,
                   message=ack.message)
    elif outcome is Outcome.FAILED:
        state.move(entry, JobState.FAILED, EventKind.FAILED, now, worker=worker,
                   message=message, data=error)
    elif outcome is Outcome.RETRY:
        rec.errors += 1
        delay = max(ack.retry_in or 0.0, 0.0)
        rec.run_at = now + delay
        state.totals.retried(rec, now)
        state.move(entry, JobState.RETRYING, EventKind.ERROR, now, worker=worker,
                   message=message,
                   data={**(error or {}), "retry": True, "retry_in": delay})
    elif outcome is Outcome.DEAD:
        rec.errors += 1 if ack.error else 0
        state.move(entry, JobState.DEAD, EventKind.DEAD, now, worker=worker,
                   message=message, data=error)
    elif outcome is Outcome.SNOOZE:  # RetryAfter: due again later; not an error attempt
        delay = max(ack.retry_in or 0.0, 0.0)
        rec.run_at = now + delay
        state.move(entry, JobState.SCHEDULED, EventKind.SNOOZED, now, worker=worker,
                   message=message, data={"retry_after": delay})
    elif outcome is Outcome.CANCELLED:
        state.move(entry, JobState.CANCELLED, EventKind.CANCELLED, now, worker=worker,
                   message=message, data=error)
    elif outcome is Outcome.SUSPENDED:  # a durable job sleeps or waits (docs/durable.md)
        durable.suspend(entry, ack, now, message)
    else:  # INTERRUPTED: put back untouched; a shutdown is not an error attempt
        state.move(entry, JobState.PENDING, EventKind.INTERRUPTED, now, worker=worker,
                   message=message or "interrupted by worker shutdown")
