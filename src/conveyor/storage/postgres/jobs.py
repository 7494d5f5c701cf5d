"""Job rows inside the caller's transaction: insert (enqueue), generic transitions, records.

Shared by the hot path (``storage.py``) and the operator actions (``inspect.py``) so every
transition appends its event and moves its batch counters the same way. The insert takes a
cursor, not a storage: it runs on whatever connection the caller's transaction is on.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from conveyor.job import EnqueueResult, FlowControl, JobRecord, JobSpec, JobState, decode_events
from conveyor.storage.postgres import batches, flow
from conveyor.storage.postgres.text import dec, enc_opt
from conveyor.storage.records import JobBlock

Cursor = psycopg.Cursor[Any]

JOB_COLUMNS = (
    "id, name, queue, payload, state, attempt, errors, recoveries, max_retries, timeout, "
    "deadline, created_at, run_at, started_at, finished_at, batch_id, worker, "
    "lease_expires_at, cancel_requested, result, message, progress, flow"
)
_COLUMNS = [
    ("id", "text"), ("name", "text"), ("queue", "text"), ("payload", "text"),
    ("state", "text"), ("max_retries", "int4"), ("timeout", "float8"), ("deadline", "float8"),
    ("created_at", "float8"), ("run_at", "float8"), ("ready_at", "float8"),
    ("batch_id", "text"), ("flow", "text"), ("unique_key", "text"),
    ("concurrency_key", "text"), ("concurrency_limit", "int4"), ("order_key", "text"),
    ("rate_key", "text"), ("rate_limit", "int4"), ("rate_period", "float8"),
    ("gated", "bool"), ("events", "text"),
]
# One statement for a whole chunk: the rows travel as one array per column.
_INSERT = (
    f"INSERT INTO jobs ({', '.join(c for c, _ in _COLUMNS)}) "
    f"SELECT * FROM unnest({', '.join(f'%s::{t}[]' for _, t in _COLUMNS)}) "
    "ON CONFLICT (id) DO NOTHING RETURNING id"
)
_QUEUES = "INSERT INTO queues (name) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING"


def event_line(now: float, kind: str, state: str | None, message: str | None = None) -> str:
    """One NDJSON event line, as ``Event.to_json`` writes it, for rows sharing one event."""
    out: dict[str, Any] = {"t": now, "k": kind}
    if state is not None:
        out["s"] = state
    if message is not None:
        out["m"] = message
    return json.dumps(out, separators=(",", ":")) + "\n"


def _row(spec: JobSpec, now: float, state: str, event: str) -> tuple[Any, ...]:
    fc = spec.flow or FlowControl()
    return (
        spec.id, spec.name, spec.queue, spec.payload, state, spec.max_retries, spec.timeout,
        spec.deadline, now, spec.run_at, now if state == "pending" else None, spec.batch_id,
        json.dumps(fc.to_wire()) if spec.flow else None, enc_opt(fc.unique_key),
        enc_opt(fc.concurrency_key), fc.concurrency_limit, enc_opt(fc.order_key),
        enc_opt(fc.rate_key), fc.rate_limit, fc.rate_period, flow.is_gated(spec.flow), event,
    )


def _write_rows(cur: Cursor, rows: Sequence[tuple[Any, ...]]) -> set[str]:
    """Insert rows built by ``_row``; returns the ids actually created."""
    if not rows:
        return set()
    columns = [list(col) for col in zip(*rows, strict=True)]
    created = {r[0] for r in cur.execute(_INSERT, columns).fetchall()}
    cur.execute(_QUEUES, (sorted({r[2] for r in rows}),))
    return created


def existing_ids(cur: Cursor, ids: Iterable[str]) -> set[str]:
    """Which of ``ids`` are stored already."""
    return {r[0] for r in cur.execute("SELECT id FROM jobs WHERE id = ANY(%s)", (list(ids),))}


def insert(cur: Cursor, now: float, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
    """Store new jobs; existing ids and held unique locks give ``created=False``."""
    batches.check_open(cur, (s.batch_id for s in specs if s.batch_id))
    flow.lock_keys(cur, [s.flow.unique_key for s in specs if s.flow and s.flow.unique_key])
    existing = existing_ids(cur, (s.id for s in specs))
    events = {
        "pending": event_line(now, "enqueued", "pending"),
        "scheduled": event_line(now, "scheduled", "scheduled"),
    }
    results: list[EnqueueResult] = []
    rows: list[tuple[Any, ...]] = []
    locks: dict[str, str] = {}  # unique keys taken by this call (their rows are not in yet)
    for spec in specs:
        holder = _holder(cur, now, spec, existing, locks)
        if holder is not None:
            results.append(EnqueueResult(holder, created=False))
            continue
        existing.add(spec.id)
        state = "scheduled" if spec.run_at is not None and spec.run_at > now else "pending"
        rows.append(_row(spec, now, state, events[state]))
        results.append(EnqueueResult(spec.id, created=True))
    created = _write_rows(cur, rows)
    # An id another transaction stored since we looked: not created by this call.
    results = [r if not r.created or r.id in created else EnqueueResult(r.id, created=False)
               for r in results]
    moves: list[batches.Move] = [(r[11], None, r[4]) for r in rows if r[11] and r[0] in created]
    batches.apply(cur, now, moves, insert)
    return results


def insert_block(cur: Cursor, now: float, block: JobBlock) -> list[EnqueueResult]:
    """``insert(cur, now, block.specs())`` without a spec per job: the rows are built from
    the block's columns (a block with flow control goes through ``insert``)."""
    if block.flows is not None and any(block.flows):
        return insert(cur, now, block.specs())
    if block.batch_id:
        batches.check_open(cur, [block.batch_id])
    existing = existing_ids(cur, block.ids)
    state = "scheduled" if block.run_at is not None and block.run_at > now else "pending"
    event = event_line(now, "enqueued" if state == "pending" else "scheduled", state)
    shared = (state, block.max_retries, block.timeout, block.deadline, now, block.run_at,
              now if state == "pending" else None, block.batch_id)
    # flow, unique_key, concurrency key/limit, order_key, rate key/limit/period, gated: none
    tail = (None, None, None, 0, None, None, 0, 0.0, False, event)
    rows: list[tuple[Any, ...]] = []
    for job_id, payload in zip(block.ids, block.payloads, strict=True):
        if job_id not in existing:
            existing.add(job_id)
            rows.append((job_id, block.name, block.queue, payload, *shared, *tail))
    created = _write_rows(cur, rows)
    if block.batch_id and created:
        batches.apply(cur, now, [(block.batch_id, None, state)] * len(created), insert)
    return [EnqueueResult(job_id, created=job_id in created) if i == first.get(job_id)
            else EnqueueResult(job_id, created=False)
            for first in [_first_index(block.ids)] for i, job_id in enumerate(block.ids)]


def _first_index(ids: Sequence[str]) -> dict[str, int]:
    first: dict[str, int] = {}
    for i, job_id in enumerate(ids):
        first.setdefault(job_id, i)
    return first


def _holder(
    cur: Cursor, now: float, spec: JobSpec, existing: set[str], locks: dict[str, str]
) -> str | None:
    """The id that stands in for ``spec`` (itself if stored, a unique-lock holder), or None."""
    if spec.id in existing:
        return spec.id
    if spec.flow is None:
        return None
    flow.validate(spec.flow)
    if spec.flow.unique_key is None:
        return None
    key = spec.flow.unique_key
    holder = locks.get(key) or flow.unique_holder(cur, now, key)
    if holder is None:
        flow.lock_unique(cur, now, spec)
        locks[key] = spec.id
    return holder


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
REQUEUE = "ready_at = %(now)s, finished_at = NULL, token = NULL, lease_expires_at = NULL"


def add_totals(cur: Cursor, now: float, counts: Counter[tuple[str, str, str]]) -> None:
    """Add outcome counts keyed (queue, name, processed|failed|dead|retried) to the totals."""
    per_job: dict[tuple[str, str], Counter[str]] = {}
    per_day: dict[str, Counter[str]] = {}
    for (queue, name, kind), n in counts.items():
        per_job.setdefault((queue, name), Counter())[kind] += n
        day = per_day.setdefault(queue, Counter())
        if kind == "processed":
            day["processed"] += n
        elif kind in ("failed", "dead"):
            day["failed"] += n
    jobs_rows = sorted((q, n, c["processed"], c["failed"], c["dead"], c["retried"])
                       for (q, n), c in per_job.items())
    cur.execute(
        "INSERT INTO job_totals AS t (queue, name, processed, failed, dead, retried) "
        "SELECT * FROM unnest(%s::text[], %s::text[], %s::int8[], %s::int8[], %s::int8[], "
        "%s::int8[]) ON CONFLICT (queue, name) DO UPDATE SET "
        "processed = t.processed + excluded.processed, failed = t.failed + excluded.failed, "
        "dead = t.dead + excluded.dead, retried = t.retried + excluded.retried",
        [list(col) for col in zip(*jobs_rows, strict=True)],
    )
    today = time.strftime("%Y-%m-%d", time.gmtime(now))
    day_rows = sorted((q, c["processed"], c["failed"]) for q, c in per_day.items())
    cur.execute(
        "INSERT INTO daily_totals AS t (queue, day, processed, failed) "
        "SELECT q, %s, p, f FROM unnest(%s::text[], %s::int8[], %s::int8[]) AS u(q, p, f) "
        "ON CONFLICT (queue, day) DO UPDATE SET processed = t.processed + excluded.processed, "
        "failed = t.failed + excluded.failed",
        [today, *[list(col) for col in zip(*day_rows, strict=True)]],
    )


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
