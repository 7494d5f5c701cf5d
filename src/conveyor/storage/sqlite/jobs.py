"""Job rows inside the caller's transaction: insert (enqueue), generic transitions, records.

Shared by the hot path (``storage.py``) and the operator actions (``inspect.py``) so every
transition appends its event and moves its batch counters the same way.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

from conveyor.core.job import (
    EnqueueResult,
    EventKind,
    FlowControl,
    JobRecord,
    JobSpec,
    JobState,
    decode_events,
)
from conveyor.storage import aggregation
from conveyor.storage.blocks import JobBlock
from conveyor.storage.lineup import first_aging
from conveyor.storage.rules import CANCELLED_WHILE_WAITING, is_gated, validate_flow
from conveyor.storage.sqlite import batches, flow, graph
from conveyor.storage.sqlite.group_rows import Joiner

# Re-exported: every transition of this package goes through them (moves.py).
from conveyor.storage.sqlite.moves import FINISH as FINISH
from conveyor.storage.sqlite.moves import REQUEUE as REQUEUE
from conveyor.storage.sqlite.moves import event_line as event_line
from conveyor.storage.sqlite.moves import ids_param as ids_param
from conveyor.storage.sqlite.moves import move as move
from conveyor.storage.stored_data import StoredData
from conveyor.storage.totals import minute_of

JOB_COLUMNS = (
    "id, name, queue, payload, state, attempt, errors, recoveries, max_retries, timeout, "
    "deadline, created_at, run_at, started_at, finished_at, batch_id, worker, "
    "lease_expires_at, cancel_requested, result, message, progress, flow"
)

_INSERT = (
    "INSERT INTO jobs (id, name, queue, payload, state, max_retries, timeout, deadline, "
    "created_at, run_at, ready_at, batch_id, flow, unique_key, concurrency_key, "
    "concurrency_limit, order_key, rate_key, rate_limit, rate_period, gated, events, "
    "group_key, breaker_key) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _row(spec: JobSpec, now: float, state: str, event: str) -> tuple[Any, ...]:
    fc = spec.flow or FlowControl()
    return (
        spec.id, spec.name, spec.queue, spec.payload, state, spec.max_retries, spec.timeout,
        spec.deadline, now, spec.run_at, now if state in _READY else None, spec.batch_id,
        json.dumps(fc.to_wire()) if spec.flow else None, fc.unique_key, fc.concurrency_key,
        fc.concurrency_limit, fc.order_key, fc.rate_key, fc.rate_limit, fc.rate_period,
        1 if is_gated(spec.flow) else 0, event, fc.group_key, fc.breaker_key,
    )


# ready_at: when a job became pending (FIFO), or a member arrived in its group
_READY = frozenset({"pending", "aggregating"})


def insert(cur: sqlite3.Cursor, now: float, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
    """Store new jobs; existing ids and held unique locks give ``created=False``."""
    batches.check_open(cur, (s.batch_id for s in specs if s.batch_id))
    existing = {row[0] for row in cur.execute(
        "SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
        (ids_param(s.id for s in specs),),
    )}
    events = {
        "pending": event_line(now, "enqueued", "pending"),
        "scheduled": event_line(now, "scheduled", "scheduled"),
        "waiting": event_line(now, "enqueued", "waiting"),
        "aggregating": event_line(now, "enqueued", "aggregating"),
    }
    joiner = Joiner(cur, now)
    results: list[EnqueueResult] = []
    rows: list[tuple[Any, ...]] = []
    moves: list[batches.Move] = []
    locks: dict[str, str] = {}  # unique keys taken by this call (their rows are not in yet)
    nodes: list[JobSpec] = []
    for spec in specs:
        holder = _holder(cur, now, spec, existing, locks)
        if holder is not None:
            results.append(EnqueueResult(holder, created=False))
            continue
        existing.add(spec.id)
        state = ("waiting" if spec.waits else
                 "scheduled" if spec.run_at is not None and spec.run_at > now else "pending")
        member = aggregation.arrival(spec.id, spec.queue, spec.name, spec.flow)
        if state == "pending" and member is not None and not joiner.leads(member):
            state = "aggregating"
        rows.append(_row(spec, now, state, events[state]))
        if spec.flow is not None and spec.flow.fold_key:
            cur.executemany(_INSERT, rows[-1:])  # now: the next call of its key joins it
            rows.pop()
        if spec.node is not None:
            nodes.append(spec)
        if spec.batch_id:
            moves.append((spec.batch_id, None, state))
        results.append(EnqueueResult(spec.id, created=True))
    cur.executemany(_INSERT, rows)
    line(cur, now, [s for s, r in zip(specs, results, strict=True)
                    if r.created and r.id == s.id and s.flow is not None])
    joiner.write()
    graph.insert(cur, nodes)
    cur.executemany(
        "INSERT OR IGNORE INTO queues (name) VALUES (?)", [(q,) for q in {r[2] for r in rows}]
    )
    batches.apply(cur, now, moves, insert)
    return results


# A job the lineup places (storage/sqlite/lineup.py) is "lined", and gated too: the one
# probe dequeue makes per queue (``jobs_ready_gated``) finds it.
_LINE = ("UPDATE jobs SET lined = 1, gated = 1, priority = :priority, fair_key = :fair_key, "
         "cost = :cost, aging = :aging, age_next = :age_next WHERE id = :id")



def line(cur: sqlite3.Cursor, now: float, specs: Sequence[JobSpec]) -> None:
    """Mark the newly inserted jobs that the lineup places (``FlowControl.in_lineup``)."""
    rows = [{"id": s.id, "priority": s.flow.priority, "fair_key": s.flow.fair_key,
             "cost": s.flow.cost, "aging": s.flow.aging or None,
             "age_next": first_aging(s.flow.aging, s.run_at, now)}
            for s in specs if s.flow is not None and s.flow.in_lineup]
    if rows:
        cur.executemany(_LINE, rows)


def insert_block(cur: sqlite3.Cursor, now: float, block: JobBlock) -> list[EnqueueResult]:
    """``insert(cur, now, block.specs())`` without a spec per job: the rows are built from
    the block's columns (a block with flow control goes through ``insert``)."""
    if block.flows is not None and any(block.flows):
        return insert(cur, now, block.specs())
    if block.batch_id:
        batches.check_open(cur, [block.batch_id])
    state = "scheduled" if block.run_at is not None and block.run_at > now else "pending"
    event = event_line(now, "enqueued" if state == "pending" else "scheduled", state)
    shared = (state, block.max_retries, block.timeout, block.deadline, now, block.run_at,
              now if state == "pending" else None, block.batch_id)
    if _insert_all(cur, block, shared, event):
        results = _created(block.ids)
        _after_insert(cur, now, block, state, len(results))
        return results
    existing = {row[0] for row in cur.execute(
        "SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
        (ids_param(block.ids),),
    )}
    # flow, unique_key, concurrency key/limit, order_key, rate key/limit/period, gated,
    # group_key, breaker_key: none
    tail = (None, None, None, 0, None, None, 0, 0.0, 0, event, None, None)
    rows: list[tuple[Any, ...]] = []
    results = []
    for job_id, payload in zip(block.ids, block.payloads, strict=True):
        if job_id in existing:
            results.append(EnqueueResult(job_id, created=False))
            continue
        existing.add(job_id)
        rows.append((job_id, block.name, block.queue, payload, *shared, *tail))
        results.append(EnqueueResult(job_id, created=True))
    cur.executemany(_INSERT, rows)
    _after_insert(cur, now, block, state, len(rows))
    return results


# A block's rows in one statement: the columns its jobs share are bound once, the ids and
# payloads come from one JSON object {id: payload} (binding 22 parameters per row from Python
# costs twice what SQLite then spends storing the row). An object, not an array of [id,
# payload] pairs: json_each hands out each member's key and value as they are, where
# json_extract would parse every pair twice more (a third of the statement's time).
# The rows are inserted in the order json_each yields the members, the text's order (a scan
# of one table-valued function, nothing to reorder it), so rowids follow the block: FIFO
# within a block rests on it (tests/sqlite/test_block_insert.py). "ORDER BY rowid" would
# say so in SQL but sorts every block (15 % of the statement), as SQLite does not know the
# scan is already in that order.
_INSERT_BLOCK = (
    "INSERT INTO jobs (id, name, queue, payload, state, max_retries, timeout, deadline, "
    "created_at, run_at, ready_at, batch_id, events) "
    "SELECT key, :name, :queue, value, :state, :max_retries, :timeout, :deadline, :now, "
    ":run_at, :ready_at, :batch_id, :event FROM json_each(:rows)"
)


def _insert_all(cur: sqlite3.Cursor, block: JobBlock, shared: tuple[Any, ...],
                event: str) -> bool:
    """Insert every job of ``block`` with ``_INSERT_BLOCK``; False, with nothing stored,
    when an id exists or repeats (the statement is undone alone, the transaction goes on)
    or a payload holds a NUL (which JSON functions do not carry)."""
    if not block.ids:
        return True
    members = dict(zip(block.ids, block.payloads, strict=True))
    if len(members) < len(block.ids):  # an id repeats: the object would keep one of them
        return False
    rows = _json_rows(members)
    if "\\u0000" in rows:
        return False
    state, max_retries, timeout, deadline, now, run_at, ready_at, batch_id = shared
    try:
        cur.execute(_INSERT_BLOCK, {
            "name": block.name, "queue": block.queue, "state": state,
            "max_retries": max_retries, "timeout": timeout, "deadline": deadline, "now": now,
            "run_at": run_at, "ready_at": ready_at, "batch_id": batch_id, "event": event,
            "rows": rows})
    except sqlite3.IntegrityError:  # UNIQUE constraint failed: jobs.id
        return False
    return True


def _created(ids: Sequence[str]) -> list[EnqueueResult]:
    """``[EnqueueResult(i, True) for i in ids]`` in less than half the time: the frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``, here the slots'
    own setters are mapped over the lot (this runs in the thread that stores the blocks of a
    bulk enqueue, the one the caller waits for)."""
    count = len(ids)
    out = list(map(_new_result, repeat(EnqueueResult, count)))
    deque(map(_set_id, out, ids), 0)
    deque(map(_set_created, out, repeat(True, count)), 0)
    return out


_new_result = EnqueueResult.__new__
# The slots' member descriptors (a frozen dataclass's own setattr refuses)
_set_id: Callable[[EnqueueResult, str], None] = vars(EnqueueResult)["id"].__set__
_set_created: Callable[[EnqueueResult, bool], None] = vars(EnqueueResult)["created"].__set__
_json_rows = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _after_insert(cur: sqlite3.Cursor, now: float, block: JobBlock, state: str,
                  stored: int) -> None:
    """The queue's row, and the batch's counters for ``stored`` new jobs."""
    if stored:
        cur.execute("INSERT OR IGNORE INTO queues (name) VALUES (?)", (block.queue,))
    if block.batch_id and stored:
        batches.apply(cur, now, [(block.batch_id, None, state)] * stored, insert)


def _holder(
    cur: sqlite3.Cursor, now: float, spec: JobSpec, existing: set[str], locks: dict[str, str]
) -> str | None:
    """The id that stands in for ``spec`` (itself if stored, a unique-lock holder), or None."""
    if spec.id in existing:
        return spec.id
    if spec.flow is None:
        return None
    validate_flow(spec.flow)
    if spec.flow.fold_key:  # debounce / throttle: join the key's scheduled job
        joined = flow.fold_holder(cur, spec.flow.fold_key)
        if joined is not None:
            flow.fold(cur, joined, spec)
        else:
            flow.lock_fold(cur, spec)
        return joined
    if spec.flow.unique_key is None:
        return None
    key = spec.flow.unique_key
    holder = locks.get(key) or flow.unique_holder(cur, now, key)
    if holder is None:
        flow.lock_unique(cur, now, spec)
        locks[key] = spec.id
    return holder


def add_totals(cur: sqlite3.Cursor, now: float, counts: Counter[tuple[str, str, str]]) -> None:
    """Add outcome counts keyed (queue, name, processed|failed|dead|retried) to the totals:
    all time per job name, and per minute per queue (the overview's history, which "today"
    is also read from)."""
    per_job: dict[tuple[str, str], Counter[str]] = {}
    per_queue: dict[str, Counter[str]] = {}
    for (queue, name, kind), n in counts.items():
        per_job.setdefault((queue, name), Counter())[kind] += n
        per_queue.setdefault(queue, Counter())[kind] += n
    cur.executemany(
        "INSERT INTO job_totals (queue, name, processed, failed, dead, retried) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (queue, name) DO UPDATE SET "
        "processed = processed + excluded.processed, failed = failed + excluded.failed, "
        "dead = dead + excluded.dead, retried = retried + excluded.retried",
        [(q, n, c["processed"], c["failed"], c["dead"], c["retried"])
         for (q, n), c in per_job.items()],
    )
    cur.executemany(
        "INSERT INTO minute_totals (queue, minute, processed, failed, dead, retried) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (queue, minute) DO UPDATE SET "
        "processed = processed + excluded.processed, failed = failed + excluded.failed, "
        "dead = dead + excluded.dead, retried = retried + excluded.retried",
        [(q, minute_of(now), c["processed"], c["failed"], c["dead"], c["retried"])
         for q, c in per_queue.items()],
    )


def record(row: Sequence[Any], events: str | None = None) -> JobRecord:
    """A ``JobRecord`` from a row selected with ``JOB_COLUMNS`` (plus the event log if given)."""
    progress = json.loads(row[21]) if row[21] else None
    return JobRecord(
        id=row[0], name=row[1], queue=row[2], payload=row[3], state=JobState(row[4]),
        attempt=row[5], errors=row[6], recoveries=row[7], max_retries=row[8], timeout=row[9],
        deadline=row[10], created_at=row[11], run_at=row[12], started_at=row[13],
        finished_at=row[14], batch_id=row[15], worker=row[16], lease_expires_at=row[17],
        cancel_requested=bool(row[18]), result=row[19], message=row[20],
        progress=(int(progress[0]), int(progress[1])) if progress else None,
        flow=FlowControl.from_wire(json.loads(row[22])) if row[22] else None,
        events=decode_events(events) if events is not None else None,
    )


def decode_text(
    row: Sequence[Any], columns: Mapping[str, int]
) -> tuple[list[str | None], str | None]:
    """The text columns of ``row`` read as BLOBs (``CAST(col AS BLOB)``), each decoded on its
    own: a column that is not UTF-8 is decoded with U+FFFD in place of the bad bytes, and
    the reason is returned too (``None`` when every column is sound)."""
    values: list[str | None] = []
    reasons: list[str] = []
    for column, index in columns.items():
        raw = row[index]
        if raw is None:
            values.append(None)
            continue
        try:
            values.append(bytes(raw).decode("utf-8"))
        except UnicodeDecodeError as exc:
            values.append(bytes(raw).decode("utf-8", "replace"))
            reasons.append(f"column {column} is not UTF-8 ({exc.reason} at byte {exc.start})")
    return values, "; ".join(reasons) or None


# States a job waits in before it runs: a cancel request cancels it at once.
WAITING = ("scheduled", "pending", "retrying", "waiting", "aggregating")


def cancel(cur: sqlite3.Cursor, now: float, job_id: str) -> JobState | None:
    """Cancel one job inside the caller's transaction (``Storage.cancel``); returns its
    resulting state."""
    row = cur.execute(
        "SELECT id, state, batch_id, cancel_requested FROM jobs WHERE id = ?", (job_id,)
    ).fetchone()
    if row is None:
        return None
    cancel_rows(cur, now, [row])
    state = JobState(row[1])
    return JobState.CANCELLED if state.value in WAITING else state


def cancel_rows(cur: sqlite3.Cursor, now: float, rows: Sequence[Any]) -> None:
    """Rows ``(id, state, batch_id, cancel_requested)``: waiting ones become cancelled,
    active ones get a cancellation request their worker sees at the next heartbeat."""
    waiting = [r[:3] for r in rows if r[1] in WAITING]
    moves = move(cur, now, waiting, JobState.CANCELLED, EventKind.CANCELLED,
                 CANCELLED_WHILE_WAITING, f"message = :msg, {FINISH}")
    batches.apply(cur, now, moves, insert)
    # The event names the worker and the attempt, as on every backend.
    cur.execute(
        "UPDATE jobs SET cancel_requested = 1, events = events || json_object("
        "'t', ?, 'k', ?, 's', 'active', 'w', worker, 'a', attempt) || char(10) "
        "WHERE id IN (SELECT value FROM json_each(?))",
        (now, EventKind.CANCEL_REQUESTED,
         ids_param(r[0] for r in rows if r[1] == "active" and not r[3])),
    )


def reseal(cur: sqlite3.Cursor, job_id: str, old: StoredData, new: StoredData) -> bool:
    """Payload, result and message of ``job_id`` set to ``new`` if they equal ``old``."""
    cur.execute("UPDATE jobs SET payload = ?, result = ?, message = ? WHERE id = ? AND "
                "payload = ? AND result IS ? AND message IS ?",
                (new.payload, new.result, new.message, job_id, old.payload, old.result,
                 old.message))
    return cur.rowcount == 1
