"""Batch bookkeeping inside the caller's transaction: counters per state, completion, callbacks.

Every job transition reports ``(batch_id, from_state, to_state)`` moves here, in the same
``BEGIN IMMEDIATE`` transaction as the job update, so counters never disagree with the jobs and
a batch's callbacks are enqueued exactly once, by the transaction that completes it.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from conveyor.core.job import ALL_STATES, BatchSpec, JobSpec
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.storage.batch_records import BatchStatus, spec_from_wire, spec_to_wire
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.sqlite import graph
from conveyor.storage.sqlite.wakeup import Wakeup, data_version

# (batch_id, from_state or None for a new job, to_state or None for a deleted job)
Move = tuple[str, "str | None", "str | None"]
EnqueueFn = Callable[[sqlite3.Cursor, float, Sequence[JobSpec]], object]

TERMINAL_SUM = "n_succeeded + n_failed + n_dead + n_cancelled"
BATCH_COLUMNS = (
    "id, description, meta, created_at, total, closed, cancelled, started_at, finished_at, "
    "callbacks_fired, kind, " + ", ".join(f"n_{s.value}" for s in ALL_STATES)
)


def create(cur: sqlite3.Cursor, now: float, spec: BatchSpec) -> None:
    """Insert an open batch (creating an existing id again is a no-op)."""
    callbacks = {event: spec_to_wire(job) for event, job in spec.callbacks.items()}
    cur.execute(
        "INSERT OR IGNORE INTO batches (id, description, meta, callbacks, created_at, kind) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (spec.id, spec.description, json.dumps(dict(spec.meta)), json.dumps(callbacks), now,
         spec.kind),
    )


def check_open(cur: sqlite3.Cursor, batch_ids: Iterable[str]) -> None:
    """Raise ``BatchNotFound`` / ``BatchClosedError`` unless every batch can take new jobs."""
    for batch_id in set(batch_ids):
        row = cur.execute("SELECT finished_at FROM batches WHERE id = ?", (batch_id,)).fetchone()
        if row is None:
            raise BatchNotFound(f"no batch {batch_id!r}")
        if row[0] is not None:
            raise BatchClosedError(f"batch {batch_id!r} has finished; it takes no new jobs")


def apply(cur: sqlite3.Cursor, now: float, moves: Iterable[Move], enqueue: EnqueueFn) -> int:
    """Move the counters, complete batches and fire callbacks as they become due, then
    settle the workflow nodes these moves marked (``graph.settle``); returns the nodes that
    settling moved (released ones are work a waiting worker should hear of)."""
    moves = list(moves)
    count(cur, now, moves, enqueue)
    if not moves:
        return 0
    return graph.settle(cur, now, lambda more: count(cur, now, more, enqueue))


def attach(cur: sqlite3.Cursor, now: float, ids: Sequence[str], enqueue: EnqueueFn) -> None:
    """Link workflow nodes added at run time into their graph, counters and callbacks moved
    with whatever that decides (``graph.attach``)."""
    graph.attach(cur, now, lambda more: count(cur, now, more, enqueue), ids)


def count(cur: sqlite3.Cursor, now: float, moves: Iterable[Move], enqueue: EnqueueFn) -> None:
    """Move the counters, then complete batches and fire callbacks as they become due."""
    deltas: dict[str, Counter[str]] = {}
    # Equal moves counted first (in C): a bulk enqueue reports thousands of the same one.
    for (batch_id, before, after), n in Counter(moves).items():
        delta = deltas.setdefault(batch_id, Counter())
        if before is None:
            delta["total"] += n
        else:
            delta[f"n_{before}"] -= n
        if after is None:
            delta["total"] -= n
        else:
            delta[f"n_{after}"] += n
    for batch_id, delta in deltas.items():
        changes = {col: n for col, n in delta.items() if n}
        if changes:
            sets = ", ".join(f"{col} = {col} + ?" for col in changes)
            started = ", started_at = coalesce(started_at, ?)" if delta["n_active"] > 0 else ""
            params: list[object] = list(changes.values())
            if started:
                params.append(now)
            cur.execute(f"UPDATE batches SET {sets}{started} WHERE id = ?", (*params, batch_id))
        settle(cur, now, batch_id, enqueue)


def settle(cur: sqlite3.Cursor, now: float, batch_id: str, enqueue: EnqueueFn) -> None:
    """Update completion and fire the callbacks that have become due, each exactly once.

    A job retried by hand re-opens a finished batch; ``success`` may therefore come after
    ``complete`` (a dead job retried and then succeeded).
    """
    row = cur.execute(
        f"SELECT closed, total, {TERMINAL_SUM}, n_succeeded, n_dead, callbacks, "
        "callbacks_fired, finished_at FROM batches WHERE id = ?",
        (batch_id,),
    ).fetchone()
    if row is None:  # trimmed away while its jobs lived on
        return
    closed, total, done, succeeded, dead, callbacks_text, fired_text, finished_at = row
    complete = bool(closed) and done >= total
    moments = [m for m, due in (("death", dead > 0), ("complete", complete),
                                ("success", complete and succeeded >= total)) if due]
    callbacks = json.loads(callbacks_text or "{}")
    fired = [name for name in fired_text.split(",") if name]
    due = [m for m in moments if m in callbacks and m not in fired]
    finished = (finished_at if finished_at is not None else now) if complete else None
    if not due and finished == finished_at:
        return
    cur.execute(
        "UPDATE batches SET callbacks_fired = ?, finished_at = ? WHERE id = ?",
        (",".join(fired + due), finished, batch_id),
    )
    specs = [_detached(cur, spec_from_wire(callbacks[name])) for name in due]
    if specs:
        enqueue(cur, now, specs)


def _detached(cur: sqlite3.Cursor, spec: JobSpec) -> JobSpec:
    """The callback as it can be stored: outside its target batch if that one cannot take it
    (rather than raise inside the acknowledgement that completed this batch)."""
    if spec.batch_id is None:
        return spec
    try:
        check_open(cur, [spec.batch_id])
    except (BatchNotFound, BatchClosedError):
        return replace(spec, batch_id=None)
    return spec


def close(cur: sqlite3.Cursor, now: float, batch_id: str, enqueue: EnqueueFn) -> None:
    """Mark a batch fully enqueued and complete it at once if every job is already terminal."""
    updated = cur.execute("UPDATE batches SET closed = 1 WHERE id = ?", (batch_id,)).rowcount
    if not updated:
        raise BatchNotFound(f"no batch {batch_id!r}")
    settle(cur, now, batch_id, enqueue)


def status_from_row(row: Sequence[Any]) -> BatchStatus:
    """A ``BatchStatus`` from a row selected with ``BATCH_COLUMNS``."""
    counts = {state.value: int(n) for state, n in zip(ALL_STATES, row[11:], strict=True)}
    return BatchStatus(
        id=row[0], description=row[1], meta=json.loads(row[2] or "{}"), created_at=row[3],
        total=int(row[4]), counts=counts, closed=bool(row[5]), cancelled=bool(row[6]),
        started_at=row[7], finished_at=row[8],
        callbacks_fired=tuple(name for name in (row[9] or "").split(",") if name),
        kind=row[10],
    )


@contextmanager
def finished_waiter(read: Callable[[], sqlite3.Connection], wakeup: Wakeup,
                    batch_id: str) -> Iterator[BatchWaiter]:
    """``Storage.batch_finished``: woken by a commit of another connection (another process
    or thread: ``PRAGMA data_version``, looked at every few ms) after which the batch has
    finished, or by a notification of this process (spurious: the caller reads again)."""

    def finished() -> bool:
        row = read().execute("SELECT finished_at FROM batches WHERE id = ?",
                             (batch_id,)).fetchone()
        return row is None or row[0] is not None

    # Seen before the caller's first read, and again after each wake-up: a commit between a
    # read and the next wait is not missed.
    seen = [(data_version(read()), wakeup.generation)]

    def remember(version: tuple[int, int]) -> None:
        seen[0] = version

    def wait(timeout: float) -> bool:
        if finished():  # committed by this thread's own connection: data_version cannot tell
            return True
        woken = wakeup.wait(read, finished, timeout, seen[0], remember)
        if woken:
            seen[0] = (data_version(read()), wakeup.generation)
        return woken

    yield BatchWaiter(wait, notifies=True)
