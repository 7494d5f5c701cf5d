"""Job rows inside the caller's transaction: insert (enqueue), generic transitions, records.

Shared by the hot path (``storage.py``) and the operator actions (``inspect.py``) so every
transition appends its event and moves its batch counters the same way. The insert takes a
cursor, not a storage: it runs on whatever connection the caller's transaction is on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from conveyor.core.job import (
    EnqueueResult,
    FlowControl,
    JobRecord,
    JobSpec,
    JobState,
    decode_events,
)
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.storage.blocks import JobBlock
from conveyor.storage.postgres import arrays, batches
from conveyor.storage.postgres.text import dec, enc_opt
from conveyor.storage.rules import validate_flow
from conveyor.storage.stored_data import StoredData

Cursor = psycopg.Cursor[Any]

JOB_COLUMNS = (
    "id, name, queue, payload, state, attempt, errors, recoveries, max_retries, timeout, "
    "deadline, created_at, run_at, started_at, finished_at, batch_id, worker, "
    "lease_expires_at, cancel_requested, result, message, progress, flow"
)
GET_JOB = f"SELECT {JOB_COLUMNS}, events FROM jobs WHERE id = %s"  # a record with its events

# The server-side enqueue (functions/enqueue.sql): one array per column.
_ENQUEUE = (
    "SELECT * FROM {schema}enqueue(%s::float8, %s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::int4[], %s::float8[], %s::float8[], %s::float8[], %s::text[], %s::text[], %s::text[], "
    "%s::float8[], %s::text[], %s::int4[], %s::text[], %s::text[], %s::int4[], %s::float8[])"
)

# One job without flow control (functions/enqueue_one.sql): scalars, no arrays to
# build on the client nor to unnest on the server.
_ENQUEUE_ONE = (
    "SELECT * FROM {schema}enqueue_one(%s::float8, %s::text, %s::text, %s::text, %s::text, "
    "%s::int4, %s::float8, %s::float8, %s::float8, %s::text)"
)

# The ``enqueue`` function's arrays after ``p_now``, in its order (``arrays.py``).
_ENCODERS: tuple[arrays.Encoder, ...] = (
    arrays.texts, arrays.texts, arrays.texts, arrays.texts, arrays.ints, arrays.floats,
    arrays.floats, arrays.floats, arrays.texts, arrays.texts, arrays.texts, arrays.floats,
    arrays.texts, arrays.ints, arrays.texts, arrays.texts, arrays.ints, arrays.floats,
)


def _columns(specs: Sequence[JobSpec]) -> list[str]:
    """The ``enqueue`` function's arrays for ``specs`` (flow control checked here)."""
    rows = []
    for spec in specs:
        if spec.flow is not None:
            validate_flow(spec.flow)
        fc = spec.flow or FlowControl()
        rows.append((
            spec.id, spec.name, spec.queue, spec.payload, spec.max_retries, spec.timeout,
            spec.deadline, spec.run_at, spec.batch_id,
            json.dumps(fc.to_wire()) if spec.flow else None, enc_opt(fc.unique_key),
            fc.unique_for, enc_opt(fc.concurrency_key), fc.concurrency_limit,
            enc_opt(fc.order_key), enc_opt(fc.rate_key), fc.rate_limit, fc.rate_period,
        ))
    return arrays.columns(rows, _ENCODERS)


def _call(schema: str | None, statement: str = _ENQUEUE) -> str:
    """The ``enqueue`` call (or ``statement``), qualified by ``schema`` when given (a
    caller's connection whose ``search_path`` does not name conveyor's schema)."""
    return statement.format(schema=f'"{schema}".' if schema else "")


def _insert_one(cur: Cursor, now: float | None, job_id: str, name: str, queue: str,
                payload: str, max_retries: int, timeout: float | None,
                deadline: float | None, run_at: float | None,
                batch_id: str | None, schema: str | None) -> list[EnqueueResult]:
    """One job without flow control: the ``enqueue_one`` function, same results."""
    return _results(cur.execute(_call(schema, _ENQUEUE_ONE), (
        now, job_id, name, queue, payload, max_retries, timeout, deadline, run_at, batch_id,
    )).fetchall())


def insert_call(now: float | None, specs: Sequence[JobSpec],
                schema: str | None = None) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters ``insert`` runs for ``specs`` (the asyncio path runs
    the same on its own connection)."""
    if len(specs) == 1 and specs[0].flow is None:
        one = specs[0]
        return _call(schema, _ENQUEUE_ONE), (
            now, one.id, one.name, one.queue, one.payload, one.max_retries, one.timeout,
            one.deadline, one.run_at, one.batch_id)
    return _call(schema), (now, *_columns(specs))


def results(rows: Sequence[tuple[Any, ...]]) -> list[EnqueueResult]:
    """``EnqueueResult``s of the rows ``insert_call``'s statement returned (or the batch
    error it reported)."""
    return _results(rows)


def insert(cur: Cursor, now: float | None, specs: Sequence[JobSpec],
           schema: str | None = None) -> list[EnqueueResult]:
    """Store new jobs in the cursor's transaction: one statement (the ``enqueue`` function),
    on any connection: ``schema`` names conveyor's schema when the connection's
    ``search_path`` does not. ``now`` is the storage clock (None: the server's). Existing ids
    and held unique locks give ``created=False``; a batch that is missing or finished raises
    before anything is written."""
    if not specs:
        return []
    if len(specs) == 1 and specs[0].flow is None:  # the common case, made lean
        one = specs[0]
        return _insert_one(cur, now, one.id, one.name, one.queue, one.payload,
                           one.max_retries, one.timeout, one.deadline, one.run_at,
                           one.batch_id, schema)
    return _results(cur.execute(_call(schema), (now, *_columns(specs))).fetchall())


def insert_block(cur: Cursor, now: float | None, block: JobBlock,
                 schema: str | None = None) -> list[EnqueueResult]:
    """``insert(cur, now, block.specs())`` without a spec per job: the arrays are built
    from the block's columns (a block with flow control goes through ``insert``)."""
    if block.flows is not None and any(block.flows):
        return insert(cur, now, block.specs(), schema)
    n = len(block)
    if not n:
        return []
    if n == 1:
        return _insert_one(cur, now, block.ids[0], block.name, block.queue, block.payloads[0],
                           block.max_retries, block.timeout, block.deadline, block.run_at,
                           block.batch_id, schema)
    nones: list[None] = [None] * n
    zeros = [0] * n
    columns = [
        block.ids, [block.name] * n, [block.queue] * n, block.payloads,
        [block.max_retries] * n, [block.timeout] * n, [block.deadline] * n, [block.run_at] * n,
        [block.batch_id] * n, nones, nones, nones, nones, zeros, nones, nones, zeros,
        [0.0] * n,
    ]
    literals = [encode(column) for encode, column in zip(_ENCODERS, columns, strict=True)]
    return _results(cur.execute(_call(schema), (now, *literals)).fetchall())


def _results(rows: Sequence[tuple[Any, ...]]) -> list[EnqueueResult]:
    """``EnqueueResult``s from the function's rows, or the batch error it reported."""
    if len(rows) == 1 and rows[0][2] is not None:
        batch_id, problem = rows[0][0], rows[0][2]
        if problem == "missing":
            raise BatchNotFound(f"no batch {batch_id!r}")
        raise BatchClosedError(f"batch {batch_id!r} has finished; it takes no new jobs")
    return [EnqueueResult(job_id, created=bool(created)) for job_id, created, _ in rows]


def move(
    cur: Cursor,
    now: float,
    rows: Sequence[tuple[str, str, str | None]],
    to: JobState,
    kind: str,
    message: str | None = None,
    sets: str = "",
) -> list[batches.Move]:
    """Move jobs ``(id, state, batch_id)`` to ``to`` with one event; returns the batch moves.

    ``sets`` adds SQL assignments (``"finished_at = %(now)s, token = NULL"``); the caller
    applies the returned moves with ``batches.apply`` once per transaction. ``message`` is
    text conveyor wrote itself (no U+0000).
    """
    if not rows:
        return []
    msg = ", 'm', %(msg)s::text" if message is not None else ""
    cur.execute(
        f"UPDATE jobs SET state = %(to)s, {sets + ', ' if sets else ''}"
        "events = events || json_build_object('t', %(now)s::float8, 'k', %(kind)s::text, "
        f"'s', %(to)s::text{msg}, 'a', attempt)::text || E'\\n' WHERE id = ANY(%(ids)s)",
        {"to": to.value, "now": now, "kind": kind, "msg": message, "ids": [r[0] for r in rows]},
    )
    return [(b, s, to.value) for _, s, b in rows if b]


FINISH = ("finished_at = %(now)s, token = NULL, lease_expires_at = NULL, "
          "cancel_requested = false")
# Back to pending by hand: not published since (a job cancelled after its publish kept the
# stamp, and its retry waited ``republish_after``).
REQUEUE = ("ready_at = %(now)s, finished_at = NULL, token = NULL, lease_expires_at = NULL, "
           "publish_at = NULL")


def record(row: Sequence[Any], events: str | None = None) -> JobRecord:
    """A ``JobRecord`` from a row selected with ``JOB_COLUMNS`` (plus the event log if
    given); never raises on stored data: a damaged row gives ``unreadable`` set."""
    damage: list[str] = []
    progress = _json(row[21], "progress", damage)
    wire = _json(row[22], "flow", damage)
    result = row[19]
    if result is not None and _json(result, "result", damage) is _BAD:
        result = None
    try:
        pair = (int(progress[0]), int(progress[1])) if progress not in (None, _BAD) else None
    except (TypeError, ValueError, IndexError, KeyError):
        damage.append("progress cannot be read")
        pair = None
    try:
        flow_control = FlowControl.from_wire(wire) if wire not in (None, _BAD) else None
    except (TypeError, ValueError, AttributeError):
        damage.append("flow cannot be read")
        flow_control = None
    state = next((s for s in JobState if s.value == row[4]), None)
    if state is None:
        damage.append(f"state {row[4]!r} is not a job state")
    out = JobRecord(
        id=row[0], name=row[1], queue=row[2], payload=row[3], state=state or JobState.DEAD,
        attempt=row[5], errors=row[6], recoveries=row[7], max_retries=row[8], timeout=row[9],
        deadline=row[10], created_at=row[11], run_at=row[12], started_at=row[13],
        finished_at=row[14], batch_id=row[15], worker=dec(row[16]), lease_expires_at=row[17],
        cancel_requested=bool(row[18]), result=result, message=dec(row[20]),
        progress=pair, flow=flow_control,
        events=decode_events(events) if events is not None else None,
    )
    if damage:
        out.unreadable = "; ".join(damage)
    return out


_BAD = object()


def _json(text: str | None, column: str, damage: list[str]) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        damage.append(f"{column} is not JSON")
        return _BAD


def reseal(cur: psycopg.Cursor[Any], job_id: str, old: StoredData, new: StoredData) -> bool:
    """Payload, result and message of ``job_id`` set to ``new`` if they equal ``old`` (the
    message as stored: ``text.enc``; payload and result are JSON, stored as they are)."""
    cur.execute("UPDATE jobs SET payload = %s, result = %s, message = %s WHERE id = %s AND "
                "payload = %s AND result IS NOT DISTINCT FROM %s AND "
                "message IS NOT DISTINCT FROM %s",
                (new.payload, new.result, enc_opt(new.message), job_id,
                 old.payload, old.result, enc_opt(old.message)))
    return cur.rowcount == 1
