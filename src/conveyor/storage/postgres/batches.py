"""Batch bookkeeping inside the caller's transaction: counters per state, completion, callbacks.

Every job transition reports ``(batch_id, from_state, to_state)`` moves here, in the same
transaction as the job update, so counters never disagree with the jobs and a batch's
callbacks are enqueued exactly once, by the transaction that completes it: the counter update
locks the batch row, and batches are updated in id order so two transactions never wait on
each other in a circle.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from conveyor.core.job import ALL_STATES, BatchSpec
from conveyor.errors import BatchNotFound
from conveyor.storage.batch_records import BatchStatus, spec_to_wire
from conveyor.storage.postgres.text import dec, enc_opt

Cursor = psycopg.Cursor[Any]
# (batch_id, from_state or None for a new job, to_state or None for a deleted job)
Move = tuple[str, "str | None", "str | None"]

TERMINAL_SUM = "n_succeeded + n_failed + n_dead + n_cancelled"
# A batch's stored n_pending counts its pending and active jobs together (a lease does not
# write the batch's row: functions/batch_moves.sql); the active ones are counted on
# jobs_batch, at most the workers' slots. Read as ``SELECT {BATCH_COLUMNS} FROM {BATCH_FROM}``.
BATCH_FROM = ("batches CROSS JOIN LATERAL (SELECT count(*)::integer AS running FROM jobs "
              "WHERE jobs.batch_id = batches.id AND jobs.state = 'active') AS a")
_COUNTED = {"pending": "n_pending - a.running", "active": "a.running"}
BATCH_COLUMNS = (
    "id, description, meta, created_at, total, closed, cancelled, started_at, finished_at, "
    "callbacks_fired, kind, " + ", ".join(_COUNTED.get(s.value, f"n_{s.value}")
                                          for s in ALL_STATES)
)


def create(cur: Cursor, now: float, spec: BatchSpec) -> None:
    """Insert an open batch (creating an existing id again is a no-op)."""
    callbacks = {event: spec_to_wire(job) for event, job in spec.callbacks.items()}
    plain = spec.kind == "batch"
    kind, value, extra = ("", "", ()) if plain else (", kind", ", %s", (spec.kind,))
    cur.execute(
        # ``kind`` is written only for a workflow: a plain batch is stored as before it existed
        f"INSERT INTO batches (id, description, meta, callbacks, created_at{kind}) "
        f"VALUES (%s, %s, %s, %s, %s{value}) ON CONFLICT (id) DO NOTHING",
        (spec.id, enc_opt(spec.description), json.dumps(dict(spec.meta)), json.dumps(callbacks),
         now, *extra),
    )


def apply(cur: Cursor, now: float | None, moves: Iterable[Move]) -> None:
    """Move the counters, then complete batches and fire callbacks as they become due: one
    statement (the ``batch_moves`` function, functions/batch_moves.sql)."""
    rows = list(moves)
    if rows:
        cur.execute("SELECT batch_moves(clock_now(%s::float8), %s::text[], %s::text[], %s::text[])",
                    (now, *[list(col) for col in zip(*rows, strict=True)]))


def close(cur: Cursor, now: float | None, batch_id: str) -> None:
    """Mark a batch fully enqueued and complete it at once if every job is already terminal."""
    updated = cur.execute("UPDATE batches SET closed = true WHERE id = %s", (batch_id,)).rowcount
    if not updated:
        raise BatchNotFound(f"no batch {batch_id!r}")
    cur.execute("SELECT settle_batch(clock_now(%s::float8), %s)", (now, batch_id))


def status_from_row(row: Sequence[Any]) -> BatchStatus:
    """A ``BatchStatus`` from a row selected with ``BATCH_COLUMNS``."""
    counts = {state.value: int(n) for state, n in zip(ALL_STATES, row[11:], strict=True)}
    return BatchStatus(
        id=row[0], description=dec(row[1]), meta=json.loads(row[2] or "{}"), created_at=row[3],
        total=int(row[4]), counts=counts, closed=bool(row[5]), cancelled=bool(row[6]),
        started_at=row[7], finished_at=row[8],
        callbacks_fired=tuple(name for name in (row[9] or "").split(",") if name),
        kind=row[10],
    )
