"""Acknowledgements: a whole list applied in one transaction, fenced by lease token.

One ``SELECT … FOR UPDATE`` (in id order, so two callers never deadlock) locks the jobs the
acks name; acks whose token is still the job's lease are applied with one ``UPDATE … FROM
unnest(…)`` for the whole list, the others are refused with an ``ack_refused`` event; outcome
totals are upserted once per call, not per job.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import psycopg

from conveyor.job import Ack, Event, EventKind, Outcome
from conveyor.storage.postgres import batches, jobs
from conveyor.storage.postgres.text import dec, enc_opt
from conveyor.storage.rules import (
    ack_message,
    cancelled_message,
    counts_as_error,
    effective_outcome,
)

_SELECT = (
    "SELECT id, id, token, state, queue, name, batch_id, worker, attempt, cancel_requested "
    "FROM jobs WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
)
_APPLY = (
    "UPDATE jobs SET state = u.state, errors = jobs.errors + u.errors, "
    "result = coalesce(u.result, jobs.result), message = u.message, "
    "progress = coalesce(u.progress, jobs.progress), run_at = coalesce(u.run_at, jobs.run_at), "
    "ready_at = coalesce(u.ready_at, jobs.ready_at), finished_at = u.finished_at, "
    "token = NULL, lease_expires_at = NULL, events = jobs.events || u.events "
    "FROM unnest(%s::text[], %s::int4[], %s::text[], %s::text[], %s::text[], %s::float8[], "
    "%s::float8[], %s::float8[], %s::text[], %s::text[]) AS u(state, errors, result, message, "
    "progress, run_at, ready_at, finished_at, events, id) "
    "WHERE jobs.id = u.id AND jobs.state = 'active'"
)
_REFUSE = (
    "UPDATE jobs SET events = jobs.events || u.events "
    "FROM unnest(%s::text[], %s::text[]) AS u(events, id) WHERE jobs.id = u.id"
)

# outcome -> (new state, final event kind, terminal?, counted as)
_OUTCOMES: dict[Outcome, tuple[str, str, bool, str | None]] = {
    Outcome.SUCCEEDED: ("succeeded", EventKind.SUCCEEDED, True, "processed"),
    Outcome.FAILED: ("failed", EventKind.FAILED, True, "failed"),
    Outcome.RETRY: ("retrying", EventKind.ERROR, False, "retried"),
    Outcome.DEAD: ("dead", EventKind.DEAD, True, "dead"),
    Outcome.CANCELLED: ("cancelled", EventKind.CANCELLED, True, None),
    Outcome.INTERRUPTED: ("pending", EventKind.INTERRUPTED, False, None),
}


def _params(ack: Ack, outcome: Outcome, now: float, row: Sequence[Any]) -> tuple[Any, ...]:
    """The ``_APPLY`` parameters of one ack, applied as ``outcome``, for the row it matched."""
    state, kind, terminal, _ = _OUTCOMES[outcome]
    error = ack.error.to_wire() if ack.error else None
    data: dict[str, Any] | None = None
    message = ack_message(ack)
    if error is not None and outcome is Outcome.RETRY:
        # The error event's data says when the retry comes (a dead event's is the error
        # alone, as on every backend).
        data = {**error, "retry": True, "retry_in": ack.retry_in or 0.0}
    elif error is not None and outcome is Outcome.DEAD:
        data = error
    elif outcome is not ack.outcome:  # a cancel request ended it: keep what ended the attempt
        message, data = cancelled_message(message), error
    elif outcome is Outcome.FAILED or outcome is Outcome.CANCELLED:
        data = error
    final = Event(ts=now, kind=kind, state=state, message=message, worker=row[7],
                  attempt=row[8], data=data)
    events = "".join(e.to_json() + "\n" for e in (*ack.events, final))
    return (
        state, 1 if counts_as_error(ack) else 0, ack.result,
        enc_opt(message), json.dumps(list(ack.progress)) if ack.progress else None,
        now + (ack.retry_in or 0.0) if state == "retrying" else None,
        now if state == "pending" else None, now if terminal else None, events, row[1],
    )


def apply(
    cur: psycopg.Cursor[Any], now: float, acks: Sequence[Ack]
) -> tuple[list[bool], list[batches.Move]]:
    """Apply the acks; returns applied-or-refused per ack and the batch moves to apply."""
    ids = sorted({a.job_id for a in acks})
    rows = {r[0]: (*r[:7], dec(r[7]), *r[8:]) for r in cur.execute(_SELECT, (ids,))}
    applied: list[bool] = []
    updates: list[tuple[Any, ...]] = []
    refusals: list[tuple[str, str]] = []
    moves: list[batches.Move] = []
    totals: Counter[tuple[str, str, str]] = Counter()
    for ack in acks:
        row = rows.get(ack.job_id)
        ok = row is not None and row[3] == "active" and row[2] == ack.token
        applied.append(ok)
        if row is None:
            continue
        if not ok:
            refusals.append((_refused(now, ack, row[3]), row[1]))
            continue
        rows[ack.job_id] = (*row[:3], "done", *row[4:])  # a second ack in this call is refused
        outcome = effective_outcome(ack.outcome, bool(row[9]))
        updates.append(_params(ack, outcome, now, row))
        state, counted = _OUTCOMES[outcome][0], _OUTCOMES[outcome][3]
        if row[6]:
            moves.append((row[6], "active", state))
        if counted:
            totals[(row[4], row[5], counted)] += 1
    if updates:
        cur.execute(_APPLY, [list(col) for col in zip(*updates, strict=True)])
    if refusals:
        cur.execute(_REFUSE, [list(col) for col in zip(*refusals, strict=True)])
    if totals:
        jobs.add_totals(cur, now, totals)
    return applied, moves


def _refused(now: float, ack: Ack, state: str) -> str:
    return Event(
        ts=now, kind=EventKind.ACK_REFUSED, state=state if state != "done" else None,
        message=f"stale lease: {ack.outcome.value} refused",
        data={"token": ack.token, "outcome": ack.outcome.value},
    ).to_json() + "\n"
