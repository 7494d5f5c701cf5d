"""Cancelling jobs inside the caller's transaction: a waiting job is cancelled at once, an
active one gets a request its worker sees at its next heartbeat (``Storage.cancel``, and
``Inspector.cancel_batch`` a chunk at a time)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from conveyor.core.job import EventKind, JobState
from conveyor.storage.postgres import batches, graph, jobs
from conveyor.storage.rules import CANCELLED_WHILE_WAITING

Cursor = psycopg.Cursor[Any]
#: States a job waits in before it runs: a cancel request cancels it at once.
WAITING = ("scheduled", "pending", "retrying", "waiting", "aggregating")


def cancel(cur: Cursor, now: float, job_id: str) -> JobState | None:
    """Cancel one job inside the caller's transaction (``Storage.cancel``); returns its
    resulting state."""
    row = cur.execute(
        "SELECT id, state, batch_id, cancel_requested FROM jobs WHERE id = %s FOR UPDATE",
        (job_id,)
    ).fetchone()
    if row is None:
        return None
    cancel_rows(cur, now, [row])
    state = JobState(row[1])
    return JobState.CANCELLED if state.value in WAITING else state


def cancel_rows(cur: Cursor, now: float, rows: Sequence[Any]) -> None:
    """Rows ``(id, state, batch_id, cancel_requested)``: waiting ones become cancelled,
    active ones get a cancellation request their worker sees at the next heartbeat."""
    waiting = [r[:3] for r in rows if r[1] in WAITING]
    moves = jobs.move(cur, now, waiting, JobState.CANCELLED, EventKind.CANCELLED,
                      CANCELLED_WHILE_WAITING, f"message = %(msg)s, {jobs.FINISH}")
    batches.apply(cur, now, moves)
    graph.settle(cur, now)
    # The event names the worker and the attempt, as on every backend.
    asked = [r[0] for r in rows if r[1] == "active" and not r[3]]
    if asked:
        cur.execute(
            "UPDATE jobs SET cancel_requested = true, events = events || json_build_object("
            "'t', %s::float8, 'k', %s::text, 's', 'active', 'w', worker, 'a', attempt)::text "
            "|| E'\\n' WHERE id = ANY(%s)",
            (now, EventKind.CANCEL_REQUESTED, asked),
        )
