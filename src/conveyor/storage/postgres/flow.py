"""Flow control inside the dequeue/enqueue transaction: unique locks, concurrency, order, rate.

Jobs with a concurrency, order or rate key are "gated": a queue holding any pending gated job
is dequeued by walking its pending jobs in order and admitting each one that its limits allow.
Jobs over a limit stay pending (no attempt is spent); queues without gated jobs take the fast
single-statement path in ``storage.py``. Counting a limit and admitting against it must not
interleave between transactions, so a gated dequeue holds a transaction advisory lock (one
per schema) while it walks; unique keys are locked the same way, one lock per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from conveyor.job import TERMINAL_STATES, FlowControl, JobSpec
from conveyor.storage.postgres.text import enc

Cursor = psycopg.Cursor[Any]

_TERMINAL = frozenset(s.value for s in TERMINAL_STATES)
_PAGE = 256
_MAX_SCAN = 4096  # bound the work of one dequeue when many pending jobs are held back


def validate(flow: FlowControl) -> None:
    """Raise ``ValueError`` for settings that could never admit a job."""
    if flow.concurrency_key is not None and flow.concurrency_limit < 1:
        raise ValueError(f"concurrency_key {flow.concurrency_key!r} needs concurrency_limit >= 1")
    if flow.rate_key is not None and (flow.rate_limit < 1 or flow.rate_period <= 0):
        raise ValueError(f"rate_key {flow.rate_key!r} needs rate_limit >= 1 and rate_period > 0")


def is_gated(flow: FlowControl | None) -> bool:
    """True when the job waits on a concurrency, order or rate limit."""
    return flow is not None and bool(flow.concurrency_key or flow.order_key or flow.rate_key)


def gate_lock(cur: Cursor) -> None:
    """Serialise gated dequeues of this schema until the transaction ends."""
    cur.execute("SELECT pg_advisory_xact_lock(hashtext('conveyor-gate:' || current_schema()))")


def lock_keys(cur: Cursor, keys: Sequence[str]) -> None:
    """Take the transaction advisory lock of each unique key (in order: no deadlock)."""
    if keys:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('conveyor-unique:' || k)) "
                    "FROM unnest(%s::text[]) AS k ORDER BY k", (sorted({enc(k) for k in keys}),))


def unique_holder(cur: Cursor, now: float, key: str) -> str | None:
    """The id of the job holding a unique lock, or None when the lock is free."""
    row = cur.execute(
        "SELECT u.job_id, u.until, j.state FROM unique_locks u "
        "LEFT JOIN jobs j ON j.id = u.job_id WHERE u.key = %s",
        (enc(key),),
    ).fetchone()
    if row is None:
        return None
    job_id, until, state = row
    if until > now or (state is not None and state not in _TERMINAL):
        return str(job_id)
    return None


def lock_unique(cur: Cursor, now: float, spec: JobSpec) -> None:
    """Take the unique lock for a new job (lock state is checked by ``unique_holder``)."""
    assert spec.flow is not None and spec.flow.unique_key is not None
    cur.execute(
        "INSERT INTO unique_locks (key, job_id, until) VALUES (%s, %s, %s) "
        "ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, until = excluded.until",
        (enc(spec.flow.unique_key), spec.id, now + (spec.flow.unique_for or 0.0)),
    )


@dataclass
class _Gates:
    """Counts seen so far in one dequeue call, so each key is read once."""

    active: dict[str, int] = field(default_factory=dict)
    order_first: dict[str, str | None] = field(default_factory=dict)
    order_taken: set[str] = field(default_factory=set)
    rate_used: dict[str, int] = field(default_factory=dict)


def pick(cur: Cursor, now: float, queue: str, need: int) -> list[str]:
    """Ids of up to ``need`` pending jobs of ``queue`` that their limits admit, in order."""
    gates = _Gates()
    chosen: list[str] = []
    offset = 0
    while len(chosen) < need and offset < _MAX_SCAN:
        rows = cur.execute(
            "SELECT id, concurrency_key, concurrency_limit, order_key, rate_key, rate_limit, "
            "rate_period FROM jobs WHERE state = 'pending' AND queue = %s "
            "ORDER BY ready_at, seq LIMIT %s OFFSET %s",
            (queue, _PAGE, offset),
        ).fetchall()
        if not rows:
            break
        offset += len(rows)
        for row in rows:
            if _admit(cur, now, row, gates):
                chosen.append(row[0])
                if len(chosen) >= need:
                    break
    return chosen


def _admit(cur: Cursor, now: float, row: Sequence[Any], gates: _Gates) -> bool:
    """Whether the limits admit this pending job now; if so, count it against them."""
    job_id, ckey, climit, okey, rkey, rlimit, rperiod = row
    if ckey is not None and _active(cur, ckey, gates) >= climit:
        return False
    if okey is not None and not _first_in_order(cur, okey, job_id, gates):
        return False
    if rkey is not None and _rate_used(cur, now, rkey, rperiod, gates) >= rlimit:
        return False
    if ckey is not None:
        gates.active[ckey] += 1
    if okey is not None:
        gates.order_taken.add(okey)
    if rkey is not None:
        gates.rate_used[rkey] += 1
        cur.execute("INSERT INTO rate_hits (key, ts) VALUES (%s, %s)", (rkey, now))
    return True


def _active(cur: Cursor, key: str, gates: _Gates) -> int:
    if key not in gates.active:
        gates.active[key] = int((cur.execute(
            "SELECT count(*) FROM jobs WHERE state = 'active' AND concurrency_key = %s", (key,)
        ).fetchone() or (0,))[0])
    return gates.active[key]


def _first_in_order(cur: Cursor, key: str, job_id: str, gates: _Gates) -> bool:
    """True when ``job_id`` is the oldest unfinished job of its order key and none runs."""
    if key in gates.order_taken:
        return False
    if key not in gates.order_first:
        row = cur.execute(
            "SELECT id FROM jobs WHERE order_key = %s "
            "AND state IN ('pending', 'active', 'retrying') ORDER BY seq LIMIT 1",
            (key,),
        ).fetchone()
        gates.order_first[key] = row[0] if row else None
    return gates.order_first[key] == job_id


def _rate_used(cur: Cursor, now: float, key: str, period: float, gates: _Gates) -> int:
    if key not in gates.rate_used:
        cur.execute("DELETE FROM rate_hits WHERE key = %s AND ts <= %s", (key, now - period))
        gates.rate_used[key] = int((cur.execute(
            "SELECT count(*) FROM rate_hits WHERE key = %s", (key,)
        ).fetchone() or (0,))[0])
    return gates.rate_used[key]
