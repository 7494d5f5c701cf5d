"""Lifecycle rules every backend applies the same way (docs/api.md, "Job lifecycle rules").

The memory, SQLite and PostgreSQL backends call these; ``redis/lua/ack.lua`` and
``reclaim.lua`` spell the same rules in Lua. The conformance suite
(``test_cancel_and_message.py``) pins them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conveyor.core.flow_control import GATE_KEYS, KEY_KINDS
from conveyor.core.job import Ack, EventKind, FlowControl, Outcome
from conveyor.core.text import MAX_KEY_BYTES, key_fault, shown

__all__ = [
    "CANCELLED_WHILE_WAITING",
    "CANCELS_ON_REQUEST",
    "LEASE_EXPIRED",
    "OUTCOMES",
    "WORKER_DIED",
    "AckEffect",
    "ack_effect",
    "ack_message",
    "broken_gate",
    "broken_key",
    "cancelled_message",
    "counts_as_error",
    "effective_outcome",
    "is_gated",
    "validate_flow",
]

#: Outcomes that do not end a job by themselves: after a cancel request they end it
#: ``cancelled`` instead (a cancelled job must never run again). SUCCEEDED and FAILED are
#: answers the job gave; they stand.
CANCELS_ON_REQUEST = frozenset({Outcome.RETRY, Outcome.DEAD, Outcome.INTERRUPTED,
                                Outcome.SUSPENDED, Outcome.SNOOZE})

#: ``message`` of a job cancelled before (or between) its attempts.
CANCELLED_WHILE_WAITING = "cancelled while waiting"

#: Why a recovered attempt was lost: its lease ran out (``reclaim_expired``), or the
#: supervisor of its worker process saw that process die and released its leases at once
#: (``release_worker``). Either way the job is recovered by the same rules.
LEASE_EXPIRED = "lease expired"
WORKER_DIED = "worker process died"
#: ... or a broker redelivered it (``Outbox.start``): the connection of the consumer holding
#: it was lost, which a broker sees at once and a lease only when it runs out.
REDELIVERED = "redelivered by the broker: its holder's connection was lost"

#: ``message`` of a job whose deadline passed before it could start (``expired``, dead).
DEADLINE_PASSED = "deadline passed before the job could start"


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


#: outcome -> (new state, final event kind, terminal?, counted in the totals as)
OUTCOMES: dict[Outcome, tuple[str, str, bool, str | None]] = {
    Outcome.SUCCEEDED: ("succeeded", EventKind.SUCCEEDED, True, "processed"),
    Outcome.FAILED: ("failed", EventKind.FAILED, True, "failed"),
    Outcome.RETRY: ("retrying", EventKind.ERROR, False, "retried"),
    Outcome.DEAD: ("dead", EventKind.DEAD, True, "dead"),
    Outcome.CANCELLED: ("cancelled", EventKind.CANCELLED, True, None),
    Outcome.INTERRUPTED: ("pending", EventKind.INTERRUPTED, False, None),
    # A durable job sleeping or waiting (docs/durable.md): ``scheduled`` until ``resume_at``
    # (sooner when what it waits for arrives), not an error attempt, counted nowhere.
    Outcome.SUSPENDED: ("scheduled", EventKind.SUSPENDED, False, None),
    # ``RetryAfter``: due again at now + ``retry_in``, not an error, not counted
    Outcome.SNOOZE: ("scheduled", EventKind.SNOOZED, False, None),
}


@dataclass(frozen=True, slots=True)
class AckEffect:
    """What one acknowledgement does to its job when applied as ``outcome``: the state it
    moves to, the final event (kind, message, data), whether that ends the job, and what it
    counts as in the outcome totals. The backends write it; they decide nothing else."""

    outcome: Outcome
    state: str
    kind: str
    terminal: bool
    counted: str | None
    message: str | None
    data: dict[str, Any] | None


def ack_effect(ack: Ack, outcome: Outcome) -> AckEffect:
    """The effect of ``ack`` applied as ``outcome`` (``effective_outcome`` of its own)."""
    state, kind, terminal, counted = OUTCOMES[outcome]
    error = ack.error.to_wire() if ack.error else None
    data: dict[str, Any] | None = None
    message = ack_message(ack)
    if error is not None and outcome is Outcome.RETRY:
        # The error event's data says when the retry comes (a dead event's is the error
        # alone, as on every backend).
        data = {**error, "retry": True, "retry_in": ack.retry_in or 0.0}
    elif error is not None and outcome is Outcome.DEAD:
        data = error
    elif outcome is Outcome.SNOOZE:  # until when: the event's time plus this
        data = {"retry_after": ack.retry_in or 0.0}
    elif outcome is not ack.outcome:  # a cancel request ended it: keep what ended the attempt
        message, data = cancelled_message(message), error
    elif outcome is Outcome.FAILED or outcome is Outcome.CANCELLED:
        data = error
    elif outcome is Outcome.SUSPENDED:
        data = {"until": ack.resume_at}
    return AckEffect(outcome, state, kind, terminal, counted, message, data)


#: Debounce / throttle keys share the unique-lock table (hash on Redis, ``lua/enqueue.lua``),
#: apart from unique keys by this prefix.
FOLD_PREFIX = "\x1ffold:"


def validate_flow(flow: FlowControl) -> None:
    """Raise ``ValueError`` for flow-control settings that could never admit a job."""
    if flow.concurrency_key is not None and flow.concurrency_limit < 1:
        raise ValueError(f"concurrency_key {shown(flow.concurrency_key)} needs "
                         "concurrency_limit >= 1")
    if flow.rate_key is not None and (flow.rate_limit < 1 or flow.rate_period <= 0):
        raise ValueError(f"rate_key {shown(flow.rate_key)} needs rate_limit >= 1 and "
                         "rate_period > 0")


def is_gated(flow: FlowControl | None) -> bool:
    """True when the job waits on a concurrency, order or rate limit or a breaker (a "gated"
    job: the SQL backends walk a queue holding one in order, admitting what the gates allow)."""
    return flow is not None and bool(flow.concurrency_key or flow.order_key or flow.rate_key
                                     or flow.breaker_key)


def broken_key_message(kind: str) -> str:
    """``message`` of a job whose stored ``kind`` ("rate key") breaks the key rule. Lua
    (``redis/lua/_admit.lua``) and PL/pgSQL (``postgres/functions/key_rule.sql``) spell the
    same words."""
    return (f"{kind} breaks the key rule (1 to {MAX_KEY_BYTES} bytes of UTF-8, no control "
            "characters or line breaks): the job cannot start")


def broken_key(flow: FlowControl | None) -> str | None:
    """The ``message`` a job ends ``dead`` with when it would start (``dequeue``, a broker's
    ``start``) and one of the keys consulted there (``GATE_KEYS``: concurrency, order, rate,
    breaker; the first that breaks it) breaks the key rule: written before the rule, or by a client
    that does not check it. None for a job that may be admitted by its limits."""
    if flow is None:
        return None
    return broken_gate(flow.concurrency_key, flow.order_key, flow.rate_key, flow.breaker_key)


def broken_gate(concurrency: object, order: object, rate: object,
                breaker: object = None) -> str | None:
    """``broken_key`` of a job's gate keys as a store read them (None: not set)."""
    for field, key in zip(GATE_KEYS, (concurrency, order, rate, breaker), strict=True):
        if key is not None and key != "" and key_fault(key) is not None:
            return broken_key_message(KEY_KINDS[field])
    return None
