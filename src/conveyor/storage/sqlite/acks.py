"""Acknowledgements: the whole list applied by one fenced ``UPDATE … FROM json_each``.

Each ack becomes one JSON row; a single statement joins them to the jobs they name, applies
only those whose token is still the job's lease (fencing) and returns what it changed, so a
list of 1,000 acks costs one statement plus one upsert of the totals.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from typing import Any

from conveyor.job import Ack, EventKind, Outcome
from conveyor.storage.sqlite import batches, jobs

_APPLY = """
UPDATE jobs SET
    state = a.st,
    errors = jobs.errors + a.einc,
    result = coalesce(a.result, jobs.result),
    message = a.msg,
    progress = coalesce(a.prog, jobs.progress),
    run_at = CASE WHEN a.st = 'retrying' THEN :now + a.retry_in ELSE jobs.run_at END,
    ready_at = CASE WHEN a.st = 'pending' THEN :now ELSE jobs.ready_at END,
    finished_at = CASE WHEN a.fin THEN :now ELSE NULL END,
    token = NULL, lease_expires_at = NULL, cancel_requested = 0,
    events = jobs.events || a.pre
        || json_object('t', :now, 'k', a.kind, 's', a.st, 'm', a.msg, 'w', jobs.worker,
               'a', jobs.attempt, 'd', json(a.data)) || char(10)
FROM (SELECT value ->> 0 AS id, value ->> 1 AS tok, value ->> 2 AS st, value ->> 3 AS einc,
             value ->> 4 AS result, value ->> 5 AS msg, value ->> 6 AS prog,
             value ->> 7 AS retry_in, value ->> 8 AS fin, value ->> 9 AS pre,
             value ->> 10 AS kind, value ->> 11 AS data
      FROM json_each(:acks)) AS a
WHERE jobs.id = a.id AND jobs.token = a.tok AND jobs.state = 'active'
RETURNING jobs.id, jobs.queue, jobs.name, jobs.batch_id, jobs.state
"""

# outcome -> (new state, final event kind, terminal?, counted as)
_OUTCOMES: dict[Outcome, tuple[str, str, bool, str | None]] = {
    Outcome.SUCCEEDED: ("succeeded", EventKind.SUCCEEDED, True, "processed"),
    Outcome.FAILED: ("failed", EventKind.FAILED, True, "failed"),
    Outcome.RETRY: ("retrying", EventKind.ERROR, False, "retried"),
    Outcome.DEAD: ("dead", EventKind.DEAD, True, "dead"),
    Outcome.CANCELLED: ("cancelled", EventKind.CANCELLED, True, None),
    Outcome.INTERRUPTED: ("pending", EventKind.INTERRUPTED, False, None),
}


def _wire(ack: Ack) -> list[Any]:
    state, kind, terminal, _ = _OUTCOMES[ack.outcome]
    error = ack.error.to_wire() if ack.error else None
    data: dict[str, Any] | None = None
    message = ack.message
    if error is not None and ack.outcome in (Outcome.RETRY, Outcome.DEAD):
        # The error event's data says whether a retry was scheduled.
        retry = ack.outcome is Outcome.RETRY
        data = {**error, "retry": retry, **({"retry_in": ack.retry_in or 0.0} if retry else {})}
        message = message or error["message"]
    errors_added = 1 if data is not None or ack.outcome is Outcome.RETRY else 0
    pre = "".join(e.to_json() + "\n" for e in ack.events)
    return [
        ack.job_id, ack.token, state, errors_added, ack.result, message,
        json.dumps(list(ack.progress)) if ack.progress else None,
        float(ack.retry_in or 0.0), 1 if terminal else 0, pre, kind,
        json.dumps(data) if data else None,
    ]


def apply(
    cur: sqlite3.Cursor, now: float, acks: Sequence[Ack]
) -> tuple[list[bool], list[batches.Move]]:
    """Apply the acks; returns applied-or-refused per ack and the batch moves to apply."""
    rows = cur.execute(
        _APPLY, {"now": now, "acks": json.dumps([_wire(a) for a in acks], default=str)}
    ).fetchall()
    applied = {row[0] for row in rows}
    moves: list[batches.Move] = [(b, "active", state) for _, _, _, b, state in rows if b]
    totals: Counter[tuple[str, str, str]] = Counter()
    outcome_of = {a.job_id: a.outcome for a in acks}
    for job_id, queue, name, _, _ in rows:
        counted = _OUTCOMES[outcome_of[job_id]][3]
        if counted:
            totals[(queue, name, counted)] += 1
    if totals:
        jobs.add_totals(cur, now, totals)
    refused = [a for a in acks if a.job_id not in applied]
    if refused:
        cur.executemany(
            "UPDATE jobs SET events = events || json_object('t', ?, 'k', ?, 's', state, "
            "'m', ?, 'd', json(?)) || char(10) WHERE id = ?",
            [(now, EventKind.ACK_REFUSED, f"stale lease: {a.outcome.value} refused",
              json.dumps({"token": a.token, "outcome": a.outcome.value}), a.job_id)
             for a in refused],
        )
    return [a.job_id in applied for a in acks], moves

