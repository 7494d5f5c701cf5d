"""Flow control on SQLite: pausing queues (``SqliteFlow``), and unique locks, concurrency,
order and rate inside the dequeue/enqueue transaction.

A paused queue has ``paused = 1`` in the ``queues`` table; ``dequeue`` leases nothing from it.
Jobs with a concurrency, order or rate key are "gated": a queue holding any pending gated job
is dequeued by walking its pending jobs in order and admitting each one that its limits allow.
Jobs over a limit stay pending (no attempt is spent); queues without gated jobs take the fast
single-statement path in ``storage.py``. A job with a breaker key is gated too: an open
breaker holds it, and the first job of the key past the cool-down is leased as the probe
(``storage/sqlite/breakers.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from conveyor.core.job import TERMINAL_STATES, EventKind, JobSpec, JobState
from conveyor.storage.breakers import HELD, PROBE, BreakerRow
from conveyor.storage.rules import FOLD_PREFIX, broken_gate
from conveyor.storage.sqlite import breakers
from conveyor.storage.sqlite.connection import Database
from conveyor.storage.sqlite.moves import FINISH, Move, ids_param, move
from conveyor.storage.sqlite.wakeup import Wakeup

_TERMINAL = frozenset(s.value for s in TERMINAL_STATES)
_PAGE = 256
_MAX_SCAN = 4096  # bound the work of one dequeue when many pending jobs are held back


class SqliteFlow:
    """Pause and resume queues (resuming one wakes this process's idle workers; others see
    the commit)."""

    def __init__(self, db: Database, wakeup: Wakeup) -> None:
        self._db = db
        self._wakeup = wakeup

    def pause_queue(self, queue: str) -> None:
        """Stop every worker from taking jobs from ``queue``."""
        self._set_paused(queue, 1)

    def resume_queue(self, queue: str) -> None:
        """Undo ``pause_queue``."""
        self._set_paused(queue, 0)
        self._wakeup.notify()

    def _set_paused(self, queue: str, paused: int) -> None:
        with self._db.write() as cur:
            cur.execute(
                "INSERT INTO queues (name, paused) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET paused = excluded.paused",
                (queue, paused),
            )


def unique_holder(cur: sqlite3.Cursor, now: float, key: str) -> str | None:
    """The id of the job holding a unique lock, or None when the lock is free."""
    row = cur.execute(
        "SELECT u.job_id, u.until, j.state FROM unique_locks u "
        "LEFT JOIN jobs j ON j.id = u.job_id WHERE u.key = ?",
        (key,),
    ).fetchone()
    if row is None:
        return None
    job_id, until, state = row
    if until > now or (state is not None and state not in _TERMINAL):
        return str(job_id)
    return None


def lock_unique(cur: sqlite3.Cursor, now: float, spec: JobSpec) -> None:
    """Take the unique lock for a new job (lock state is checked by ``unique_holder``)."""
    assert spec.flow is not None and spec.flow.unique_key is not None
    cur.execute(
        "INSERT OR REPLACE INTO unique_locks (key, job_id, until) VALUES (?, ?, ?)",
        (spec.flow.unique_key, spec.id, now + (spec.flow.unique_for or 0.0)),
    )


def fold_holder(cur: sqlite3.Cursor, key: str) -> str | None:
    """The scheduled job a debounced or throttled call of ``key`` joins, or None."""
    row = cur.execute(
        "SELECT u.job_id FROM unique_locks u JOIN jobs j ON j.id = u.job_id "
        "WHERE u.key = ? AND j.state = 'scheduled'", (FOLD_PREFIX + key,)).fetchone()
    return None if row is None else str(row[0])


def fold(cur: sqlite3.Cursor, holder: str, spec: JobSpec) -> None:
    """Join ``spec`` (a call) to the scheduled job ``holder``: its arguments when the call
    keeps the last, its run time under debounce."""
    assert spec.flow is not None
    flow = spec.flow
    cur.execute(
        "UPDATE jobs SET payload = CASE WHEN ? THEN ? ELSE payload END, "
        "run_at = CASE WHEN ? THEN coalesce(?, run_at) ELSE run_at END "
        "WHERE id = ? AND state = 'scheduled'",
        (flow.fold_replaces, spec.payload, flow.fold_moves, spec.run_at, holder))


def lock_fold(cur: sqlite3.Cursor, spec: JobSpec) -> None:
    """Make a new job the one its fold key's calls join."""
    assert spec.flow is not None and spec.flow.fold_key is not None
    cur.execute("INSERT OR REPLACE INTO unique_locks (key, job_id, until) VALUES (?, ?, 0)",
                (FOLD_PREFIX + spec.flow.fold_key, spec.id))


@dataclass
class Gates:
    """Counts seen so far in one dequeue call, so each key is read once."""

    active: dict[str, int] = field(default_factory=dict)
    order_first: dict[str, str | None] = field(default_factory=dict)
    order_taken: set[str] = field(default_factory=set)
    rate_used: dict[str, int] = field(default_factory=dict)
    #: Jobs met whose stored key breaks the key rule: (id, message); ``end_broken`` ends them.
    broken: list[tuple[str, str]] = field(default_factory=list)
    #: Breaker rows read in this call (None: closed), and the keys whose probe it took.
    breaker_rows: dict[str, BreakerRow | None] = field(default_factory=dict)
    probed: set[str] = field(default_factory=set)


def pick(cur: sqlite3.Cursor, now: float, queue: str, need: int) -> tuple[list[str], Gates]:
    """Ids of up to ``need`` pending jobs of ``queue`` that their limits admit, in order, and
    the call's gates (``broken``: the jobs met that ``end_broken`` must end)."""
    gates = Gates()
    chosen: list[str] = []
    offset = 0
    while len(chosen) < need and offset < _MAX_SCAN:
        rows = cur.execute(  # a queue without lined jobs (storage/sqlite/lineup.py)
            f"SELECT id, {FLOW_COLUMNS} FROM jobs WHERE state = 'pending' AND lined = 0 "
            "AND queue = ? ORDER BY ready_at LIMIT ? OFFSET ?",
            (queue, _PAGE, offset),
        ).fetchall()
        if not rows:
            break
        offset += len(rows)
        for row in rows:
            if _admit(cur, now, flow_row(row), gates):
                chosen.append(row[0])
                if len(chosen) >= need:
                    break
    return chosen, gates


#: The columns ``admit`` and ``allows`` read, in this order, after the job's id. The keys are
#: read as bytes and decoded by ``flow_row``: a key another program wrote that is not UTF-8
#: failed the whole read (every fetch of the queue); now it ends its own job, as any key that
#: breaks the key rule does.
FLOW_COLUMNS = ("CAST(concurrency_key AS BLOB), concurrency_limit, CAST(order_key AS BLOB), "
                "CAST(rate_key AS BLOB), rate_limit, rate_period, CAST(breaker_key AS BLOB)")


#: Where the keys are in a row of ``id, FLOW_COLUMNS``.
KEYS_AT = (1, 3, 4, 7)


def flow_row(row: Sequence[Any]) -> tuple[Any, ...]:
    """``(id, FLOW_COLUMNS...)`` (and whatever follows) with the keys as text: bytes that are
    not UTF-8 become lone surrogates, which the key rule refuses."""
    return (row[0], _text(row[1]), row[2], _text(row[3]), _text(row[4]), row[5], row[6],
            _text(row[7]), *row[8:])


def _text(value: Any) -> Any:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def end_broken(cur: sqlite3.Cursor, now: float, gates: Gates) -> list[Move]:
    """End the jobs ``gates`` met whose key breaks the key rule: dead with the reason, in the
    caller's transaction, as ``dequeue`` ends a job past its deadline; returns batch moves."""
    moves: list[Move] = []
    by_message: dict[str, list[str]] = {}
    for job_id, message in gates.broken:
        by_message.setdefault(message, []).append(job_id)
    gates.broken.clear()
    for message, ids in by_message.items():
        rows = [(r[0], "pending", r[1].decode("utf-8", "replace") if r[1] else None)
                for r in cur.execute(
                    "SELECT id, CAST(batch_id AS BLOB) FROM jobs WHERE state = 'pending' "
                    "AND id IN (SELECT value FROM json_each(?))", (ids_param(ids),))]
        moves += move(cur, now, rows, JobState.DEAD, EventKind.DEAD, message,
                      f"message = :msg, publish_at = NULL, {FINISH}")
    return moves


def _admit(cur: sqlite3.Cursor, now: float, row: Sequence[Any], gates: Gates,
           cost: int = 1) -> bool:
    """Whether the limits admit this pending job now; if so, count it against them."""
    if not allows(cur, now, row, gates, cost):
        return False
    take(cur, now, row, gates, cost)
    return True


def allows(cur: sqlite3.Cursor, now: float, row: Sequence[Any], gates: Gates,
           cost: int = 1) -> bool:
    """Whether the limits would admit this pending job (``id, FLOW_COLUMNS``, keys as text)
    now; it takes ``cost`` of its concurrency key's limit. A job whose key breaks the key
    rule is never admitted: it joins ``gates.broken``."""
    job_id, ckey, climit, okey, rkey, rlimit, rperiod, bkey = row
    broken = broken_gate(ckey, okey, rkey, bkey)
    if broken is not None:
        gates.broken.append((job_id, broken))
        return False
    if ckey is not None and _active(cur, ckey, gates) + cost > climit:
        return False
    if okey is not None and not _first_in_order(cur, okey, job_id, gates):
        return False
    if bkey is not None and _breaker(cur, now, bkey, gates) == HELD:
        return False
    return rkey is None or _rate_used(cur, now, rkey, rperiod, gates) < rlimit


def take(cur: sqlite3.Cursor, now: float, row: Sequence[Any], gates: Gates, cost: int = 1,
         start: bool = True) -> None:
    """Count the job (``cost`` of its concurrency key) against its limits in this call; a
    start also logs its rate hit."""
    job_id, ckey, _, okey, rkey, _, _, bkey = row
    if ckey is not None:
        gates.active[ckey] += cost
    if okey is not None:
        gates.order_taken.add(okey)
    if rkey is not None:
        gates.rate_used[rkey] += 1
        if start:
            cur.execute("INSERT INTO rate_hits (key, ts) VALUES (?, ?)", (rkey, now))
    if bkey is not None and _breaker(cur, now, bkey, gates) == PROBE:
        gates.probed.add(bkey)  # the key's other jobs wait for this one
        row_of = gates.breaker_rows[bkey]
        if start and row_of is not None:
            breakers.make_probe(cur, now, row_of, job_id)


def admit_one(cur: sqlite3.Cursor, now: float, row: Sequence[Any], gates: Gates,
              cost: int = 1) -> bool:
    """``_admit`` for one named job (the outbox's ``start``); ``gates`` spans one call."""
    return _admit(cur, now, row, gates, cost)


def would_admit(cur: sqlite3.Cursor, now: float, row: Sequence[Any], gates: Gates,
                cost: int = 1) -> bool:
    """Whether a parked job may run now, counted against ``gates`` without starting it (the
    outbox's ``publish_due``: two waiters of a key freed by one ack are not both due). One
    whose key breaks the key rule is due: its ``start`` ends it."""
    if not allows(cur, now, row, gates, cost):
        if gates.broken:
            gates.broken.clear()
            return True
        return False
    take(cur, now, row, gates, cost, start=False)
    return True


def _active(cur: sqlite3.Cursor, key: str, gates: Gates) -> int:
    if key not in gates.active:
        gates.active[key] = int(cur.execute(  # a job takes its cost of the key's limit
            "SELECT coalesce(sum(cost), 0) FROM jobs WHERE state = 'active' "
            "AND concurrency_key = ?", (key,)).fetchone()[0])
    return gates.active[key]


def _first_in_order(cur: sqlite3.Cursor, key: str, job_id: str, gates: Gates) -> bool:
    """True when ``job_id`` is the oldest unfinished job of its order key and none runs."""
    if key in gates.order_taken:
        return False
    if key not in gates.order_first:
        row = cur.execute(
            "SELECT id FROM jobs WHERE order_key = ? "
            "AND state IN ('pending', 'active', 'retrying') ORDER BY rowid LIMIT 1",
            (key,),
        ).fetchone()
        gates.order_first[key] = row[0] if row else None
    return gates.order_first[key] == job_id


def _breaker(cur: sqlite3.Cursor, now: float, key: str, gates: Gates) -> str:
    if key not in gates.breaker_rows:
        gates.breaker_rows[key] = breakers.read(cur, key)
    return breakers.verdict(cur, now, gates.breaker_rows[key], key in gates.probed)


def _rate_used(cur: sqlite3.Cursor, now: float, key: str, period: float, gates: Gates) -> int:
    if key not in gates.rate_used:
        cur.execute("DELETE FROM rate_hits WHERE key = ? AND ts <= ?", (key, now - period))
        gates.rate_used[key] = int(cur.execute(
            "SELECT count(*) FROM rate_hits WHERE key = ?", (key,)
        ).fetchone()[0])
    return gates.rate_used[key]
