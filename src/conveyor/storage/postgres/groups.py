"""Aggregation groups on PostgreSQL: the steps of ``storage/aggregation.py`` over the
``agg_groups`` table and the ``jobs_aggregating`` index (migrations/009_aggregation.sql).

Every change to a group runs under the transaction advisory lock of its (queue, name, key),
taken in key order, so concurrent enqueues, pollers and gathers of one group queue up (rows
of different groups never wait for each other). Members are stored by the ``enqueue``
function like any job and moved to ``aggregating`` in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from conveyor.core.job import EnqueueResult, EventKind, FlowControl, JobSpec, JobState, LeasedJob
from conveyor.storage import aggregation
from conveyor.storage.aggregation import Arrival, Group, GroupId, Rest
from conveyor.storage.postgres import batches, jobs

Cursor = psycopg.Cursor[Any]

_GROUP = ("queue, name, key, first_at, last_at, size, flush_at, lead, grace, max_delay, "
          "max_size")
_SAVE = (f"INSERT INTO agg_groups ({_GROUP}) SELECT * FROM unnest(%s::text[], %s::text[], "
         "%s::text[], %s::float8[], %s::float8[], %s::int4[], %s::float8[], %s::text[], "
         "%s::float8[], %s::float8[], %s::int4[]) ON CONFLICT (queue, name, key) DO UPDATE SET "
         "first_at = excluded.first_at, last_at = excluded.last_at, size = excluded.size, "
         "flush_at = excluded.flush_at, lead = excluded.lead, grace = excluded.grace, "
         "max_delay = excluded.max_delay, max_size = excluded.max_size")
_DROP = ("DELETE FROM agg_groups WHERE (queue, name, key) IN "
         "(SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))")
_MEMBERS = ("FROM jobs WHERE state = 'aggregating' AND queue = %s AND name = %s "
            "AND group_key = %s")
_LOCK = ("SELECT pg_advisory_xact_lock(hashtext('conveyor-group:' || q || chr(31) || n "
         "|| chr(31) || k)) FROM unnest(%s::text[], %s::text[], %s::text[]) AS u(q, n, k)")
_TAKE = (
    "UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = %(worker)s, "
    "token = %(token)s, lease_expires_at = %(expires)s, started_at = %(now)s, "
    "cancel_requested = false, events = events || event_line(%(now)s, 'started', 'active', "
    "NULL, %(worker)s, attempt + 1, json_build_object('lead', %(lead)s::text)::text) "
    "WHERE id = ANY(%(ids)s) AND state = 'aggregating' "
    "RETURNING id, name, queue, payload, token, attempt, errors, max_retries, timeout, "
    "batch_id, recoveries"
)


def lock(cur: Cursor, gids: Iterable[GroupId]) -> None:
    """Take the advisory locks of groups, in key order (no two transactions deadlock)."""
    ordered = sorted(set(gids))
    if ordered:
        cur.execute(_LOCK, [list(c) for c in zip(*ordered, strict=True)])


def load(cur: Cursor, gids: Iterable[GroupId]) -> dict[GroupId, Group]:
    """The stored groups among ``gids``."""
    wanted = sorted(set(gids))
    if not wanted:
        return {}
    rows = cur.execute(
        f"SELECT {_GROUP} FROM agg_groups WHERE (queue, name, key) IN "
        "(SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))",
        [list(c) for c in zip(*wanted, strict=True)]).fetchall()
    return {(r[0], r[1], r[2]): _group(r) for r in rows}


def save(cur: Cursor, groups: Iterable[Group]) -> None:
    """Write groups (inserting or replacing their rows)."""
    rows = [(g.queue, g.name, g.key, g.first_at, g.last_at, g.size, g.flush_at, g.lead,
             g.grace, g.max_delay, g.max_size) for g in groups]
    if rows:
        cur.execute(_SAVE, [list(c) for c in zip(*rows, strict=True)])


def drop(cur: Cursor, groups: Iterable[Group]) -> None:
    """Delete groups."""
    ids = [g.id for g in groups]
    if ids:
        cur.execute(_DROP, [list(c) for c in zip(*ids, strict=True)])


def join(cur: Cursor, now: float, members: Sequence[tuple[Arrival, str | None, str]]) -> None:
    """Put stored ``(arrival, batch_id, state now)`` members into their groups: the lead of
    each group stays (or goes) ``pending``, the others go ``aggregating``; every one gets its
    group key."""
    if not members:
        return
    arrivals = [m[0] for m in members]
    lock(cur, (a.group for a in arrivals))
    groups = load(cur, (a.group for a in arrivals))
    leads = aggregation.join(groups, arrivals, now)
    save(cur, groups.values())
    cur.execute("UPDATE jobs SET group_key = u.k FROM unnest(%s::text[], %s::text[]) AS u(i, k) "
                "WHERE jobs.id = u.i", ([a.id for a in arrivals], [a.key for a in arrivals]))
    back = [(a.id, state, batch) for a, batch, state in members if a.id not in leads]
    ready = [(a.id, state, batch) for a, batch, state in members
             if a.id in leads and state != "pending"]
    moves = jobs.move(cur, now, back, JobState.AGGREGATING, EventKind.ENQUEUED,
                      sets="ready_at = %(now)s")
    moves += jobs.move(cur, now, ready, JobState.PENDING, EventKind.ENQUEUED,
                       sets="ready_at = %(now)s")
    batches.apply(cur, now, moves)


def stored(cur: Cursor, now: float, specs: Sequence[JobSpec],
           results: Sequence[EnqueueResult]) -> None:
    """Put the members among ``specs`` just stored (``results``) into their groups, in the
    transaction that stored them."""
    created = {r.id for r in results if r.created}
    arrivals = [(a, s.batch_id, "pending") for s in specs if s.id in created
                and (s.run_at is None or s.run_at <= now) and not s.waits
                and (a := aggregation.arrival(s.id, s.queue, s.name, s.flow)) is not None]
    join(cur, now, arrivals)
    joined = {a.id for a, _, _ in arrivals}
    later = [(s.flow.group_key, s.id) for s in specs if s.id in created and s.flow is not None
             and s.flow.group_key and s.id not in joined]
    if later:  # scheduled members: their key, for the day they join
        cur.execute("UPDATE jobs SET group_key = u.k FROM unnest(%s::text[], %s::text[]) "
                    "AS u(k, i) WHERE jobs.id = u.i AND group_key IS NULL",
                    [list(c) for c in zip(*later, strict=True)])


def promote(cur: Cursor, now: float, limit: int) -> int:
    """Due scheduled and retrying members back into their groups; returns how many."""
    # Members due at the same moment (retried by one ack) join in enqueue order, as on
    # every backend: the group takes the settings of the last to join, and by run_at alone
    # they came in the order their rows lay in the table.
    rows = cur.execute(
        "SELECT id, state, batch_id, queue, name, flow FROM jobs WHERE state IN "
        "('scheduled', 'retrying') AND run_at <= %s AND group_key IS NOT NULL "
        "ORDER BY run_at, seq LIMIT %s FOR UPDATE SKIP LOCKED", (now, limit)).fetchall()
    members = [(a, r[2], r[1]) for r in rows if (a := _arrival(r)) is not None]
    join(cur, now, members)
    # A member whose stored settings cannot be read runs as a lead of its own.
    odd = [(r[0], r[1], r[2]) for r in rows if _arrival(r) is None]
    batches.apply(cur, now, jobs.move(cur, now, odd, JobState.PENDING, EventKind.ENQUEUED,
                                      sets="ready_at = %(now)s"))
    return len(rows)


def flush(cur: Cursor, now: float, limit: int) -> int:
    """Send a lead for each due group; returns how many were sent."""
    due = [(r[0], r[1], r[2]) for r in cur.execute(
        "SELECT queue, name, key FROM agg_groups WHERE flush_at <= %s ORDER BY flush_at "
        "LIMIT %s", (now, limit))]
    if not due:
        return 0
    lock(cur, due)
    fresh = [g for g in load(cur, due).values() if g.flush_at <= now]  # as of the lock
    txn = _Flush(cur, now)
    kept, gone = aggregation.flush(txn, fresh, now)
    save(cur, kept)
    drop(cur, gone)
    batches.apply(cur, now, txn.moves)
    return txn.sent


def gather(cur: Cursor, now: float, lead: str, token: str) -> list[LeasedJob] | None:
    """Lease the members of ``lead``'s group (see ``Storage.gather``)."""
    row = cur.execute(
        "SELECT queue, name, group_key, worker, lease_expires_at FROM jobs "
        "WHERE id = %s AND state = 'active' AND token = %s FOR UPDATE", (lead, token)).fetchone()
    if row is None:
        return None
    queue, name, key, worker, expires = row
    if key is None:
        return []
    gid = (queue, name, key)
    lock(cur, [gid])
    group = load(cur, [gid]).get(gid)
    if group is None:
        return []
    ids = [r[0] for r in cur.execute(f"SELECT id {_MEMBERS} ORDER BY ready_at, id LIMIT %s",
                                     (*gid, max(group.max_size - 1, 0)))]
    rows = cur.execute(_TAKE, {"worker": worker, "token": token, "expires": expires,
                               "now": now, "lead": lead, "ids": ids}).fetchall()
    order = {job_id: i for i, job_id in enumerate(ids)}
    rows.sort(key=lambda r: order[r[0]])
    taken = [LeasedJob(id=r[0], name=r[1], queue=r[2], payload=r[3], token=r[4], attempt=r[5],
                       errors=r[6], max_retries=r[7], timeout=r[8], batch_id=r[9],
                       recoveries=r[10]) for r in rows]
    batches.apply(cur, now, [(j.batch_id, "aggregating", "active") for j in taken
                             if j.batch_id])
    rest = cur.execute(
        f"SELECT count(*), min(ready_at) FROM (SELECT ready_at {_MEMBERS} "
        "ORDER BY ready_at, id LIMIT %s) m", (*gid, group.max_size)).fetchone()
    size, first = rest if rest is not None else (0, None)
    if aggregation.gather(group, lead, Rest(int(size), first), now):
        save(cur, [group])
    else:
        drop(cur, [group])
    return taken


class _Flush:
    """``aggregation.FlushTxn`` inside one PostgreSQL transaction (groups locked)."""

    def __init__(self, cur: Cursor, now: float) -> None:
        self._cur = cur
        self._now = now
        self.moves: list[batches.Move] = []
        self.sent = 0

    def alive(self, leads: Sequence[str]) -> set[str]:
        if not leads:
            return set()
        return {r[0] for r in self._cur.execute(
            "SELECT id FROM jobs WHERE id = ANY(%s) "
            "AND state IN ('pending', 'scheduled', 'retrying', 'active')", (list(leads),))}

    def oldest(self, group: Group) -> str | None:
        row = self._cur.execute(f"SELECT id, batch_id {_MEMBERS} ORDER BY ready_at, id LIMIT 1 "
                                "FOR UPDATE", group.id).fetchone()
        if row is None:
            return None
        self._batch = row[1]
        return str(row[0])

    def lead(self, job_id: str) -> None:
        self.moves += jobs.move(self._cur, self._now, [(job_id, "aggregating", self._batch)],
                                JobState.PENDING, EventKind.FLUSHED,
                                "its group is due: it leads the group's run",
                                "ready_at = %(now)s")
        self.sent += 1


def _arrival(row: Sequence[Any]) -> Arrival | None:
    try:
        flow = FlowControl.from_wire(json.loads(row[5])) if row[5] else None
    except (ValueError, TypeError):
        return None
    return aggregation.arrival(row[0], row[3], row[4], flow)


def _group(row: Sequence[Any]) -> Group:
    return Group(row[0], row[1], row[2], float(row[3]), float(row[4]), int(row[5]),
                 float(row[6]), row[7], float(row[8]), float(row[9]), int(row[10]))
