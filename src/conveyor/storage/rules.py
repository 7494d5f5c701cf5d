"""Lifecycle rules every backend applies the same way (docs/api.md, "Job lifecycle rules").

The memory and SQLite backends call these; ``redis/lua/ack.lua`` and ``reclaim.lua`` spell
the same rules in Lua. The conformance suite (``test_cancel_and_message.py``) pins them.
"""

from __future__ import annotations

from conveyor.job import Ack, Outcome

__all__ = [
    "CANCELLED_WHILE_WAITING",
    "CANCELS_ON_REQUEST",
    "LEASE_EXPIRED",
    "WORKER_DIED",
    "ack_message",
    "cancelled_message",
    "counts_as_error",
    "effective_outcome",
]

#: Outcomes that do not end a job by themselves: after a cancel request they end it
#: ``cancelled`` instead (a cancelled job must never run again). SUCCEEDED and FAILED are
#: answers the job gave; they stand.
CANCELS_ON_REQUEST = frozenset({Outcome.RETRY, Outcome.DEAD, Outcome.INTERRUPTED})

#: ``message`` of a job cancelled before (or between) its attempts.
CANCELLED_WHILE_WAITING = "cancelled while waiting"

#: Why a recovered attempt was lost: its lease ran out (``reclaim_expired``), or the
#: supervisor of its worker process saw that process die and released its leases at once
#: (``release_worker``). Either way the job is recovered by the same rules.
LEASE_EXPIRED = "lease expired"
WORKER_DIED = "worker process died"


def effective_outcome(outcome: Outcome, cancel_requested: bool) -> Outcome:
    """The outcome the storage applies: CANCELLED when a cancel request is pending and the
    attempt did not finish by itself."""
    if cancel_requested and outcome in CANCELS_ON_REQUEST:
        return Outcome.CANCELLED
    return outcome


def counts_as_error(ack: Ack) -> bool:
    """True when the acknowledged attempt adds one to the job's ``errors`` (its retry budget
    counts it), whatever outcome the storage applies in the end."""
    return ack.outcome is Outcome.RETRY or (ack.outcome is Outcome.DEAD and ack.error is not None)


def ack_message(ack: Ack) -> str | None:
    """The text an acknowledgement leaves as the job's ``message`` (None clears it)."""
    return ack.message or (ack.error.message if ack.error is not None else None)


def cancelled_message(text: str | None) -> str:
    """``message`` of a job a cancel request ended, given what ended its attempt."""
    return f"cancelled: {text}" if text else "cancelled while running"
