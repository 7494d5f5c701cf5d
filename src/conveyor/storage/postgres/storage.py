"""The PostgreSQL backend: ``open_postgres("postgresql://user:pass@host/db?schema=conveyor")``.

Every transition is one transaction that updates the job rows, appends their events and moves
their batch counters. Dequeue of a queue without flow control is one ``UPDATE … RETURNING``
over rows picked ``FOR UPDATE SKIP LOCKED`` (many workers never wait on each other);
acknowledgements of a whole list are one fenced ``UPDATE … FROM unnest(…)``. Times come from
the server's ``clock_timestamp()`` unless a test clock was given at open.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import psycopg

from conveyor.clock import Clock, SystemClock
from conveyor.job import (
    Ack,
    EnqueueResult,
    Event,
    EventKind,
    HeartbeatReply,
    JobSpec,
    JobState,
    LeasedJob,
)
from conveyor.storage.base import WaitsThenDequeues
from conveyor.storage.postgres import acks as ack_sql
from conveyor.storage.postgres import batches, flow, jobs
from conveyor.storage.postgres.bound import Binder
from conveyor.storage.postgres.connection import Database, Settings, parse_postgres_url, reads
from conveyor.storage.postgres.migrate import migrate
from conveyor.storage.postgres.schedules import PostgresSchedules
from conveyor.storage.postgres.text import enc
from conveyor.storage.postgres.upkeep import PostgresUpkeep
from conveyor.storage.postgres.wakeup import Listener
from conveyor.storage.records import JobBlock, WorkerInfo

ENQUEUE_CHUNK = 5000

_LEASE = """
UPDATE jobs SET state = 'active', attempt = attempt + 1, worker = %(worker)s,
    token = replace(gen_random_uuid()::text, '-', ''), lease_expires_at = %(expires)s,
    started_at = %(now)s, cancel_requested = false,
    events = events || json_build_object('t', %(now)s::float8, 'k', 'started', 's', 'active',
                                         'w', %(worker)s::text, 'a', attempt + 1)::text || E'\\n'
WHERE {where}
RETURNING id, name, queue, payload, token, attempt, errors, max_retries, timeout, batch_id,
    recoveries, ready_at, seq
"""
_LEASE_FIRST = _LEASE.format(
    where="id IN (SELECT id FROM jobs WHERE state = 'pending' AND queue = %(queue)s "
    "ORDER BY ready_at, seq LIMIT %(count)s FOR UPDATE SKIP LOCKED)"
)
_LEASE_IDS = _LEASE.format(where="id = ANY(%(ids)s) AND state = 'pending'")
# What a queue needs before its lease: paused? gated jobs waiting? jobs past their deadline?
_LOOK = (
    "SELECT coalesce((SELECT paused FROM queues WHERE name = %(queue)s), false), "
    "EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND gated AND queue = %(queue)s), "
    "EXISTS (SELECT 1 FROM jobs WHERE state = 'pending' AND queue = %(queue)s "
    "AND deadline IS NOT NULL AND deadline < %(now)s)"
)
_EXPIRE = (
    "SELECT id, state, batch_id FROM jobs WHERE state = 'pending' AND queue = %s "
    "AND deadline IS NOT NULL AND deadline < %s FOR UPDATE SKIP LOCKED"
)
_HAS_WORK = (
    "SELECT 1 FROM jobs WHERE state = 'pending' AND queue = ANY(%s) AND queue NOT IN "
    "(SELECT name FROM queues WHERE paused) LIMIT 1"
)
_EXPIRED_MESSAGE = "deadline passed before the job could start"
_SERVER_CHECK = (
    "SELECT current_setting('fsync'), current_setting('full_page_writes'), "
    "current_setting('transaction_read_only'), "
    "has_table_privilege('jobs', 'INSERT') AND has_table_privilege('jobs', 'UPDATE')"
)


def open_postgres(url: str, clock: Clock | None = None) -> PostgresStorage:
    """Open (creating the schema and migrating it if needed) the schema a URL names.

    Leases and schedules use the server's ``clock_timestamp()``. Only a clock other than the
    system clock (a test's ``FakeClock``) replaces it: a worker's own wall clock never decides.
    """
    settings = parse_postgres_url(url)
    db = Database(settings)
    with db.outages():
        migrate(db.conn(), settings)
    return PostgresStorage(settings, db, None if isinstance(clock, SystemClock) else clock)


class PostgresStorage(WaitsThenDequeues, PostgresUpkeep, PostgresSchedules):
    """``Storage`` and ``Inspector`` over one PostgreSQL schema, safe across threads and
    processes."""

    def __init__(self, settings: Settings, db: Database, clock: Clock | None) -> None:
        super().__init__(db, clock)
        self.url = settings.url
        self._listener = Listener(settings, db.where)
        self._binder = Binder(db)

    def __repr__(self) -> str:
        return f"<PostgresStorage {self._db.where}>"

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs, one transaction per chunk of ``ENQUEUE_CHUNK``."""
        results: list[EnqueueResult] = []
        for start in range(0, len(specs), ENQUEUE_CHUNK):
            chunk = specs[start:start + ENQUEUE_CHUNK]
            with self._db.write() as cur:
                results.extend(jobs.insert(cur, self._now(cur), chunk))
        return results

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store a block of jobs, one transaction per chunk of ``ENQUEUE_CHUNK``."""
        results: list[EnqueueResult] = []
        for start in range(0, len(block), ENQUEUE_CHUNK):
            end = start + ENQUEUE_CHUNK
            chunk = replace(block, ids=block.ids[start:end], payloads=block.payloads[start:end],
                            flows=None if block.flows is None else block.flows[start:end])
            with self._db.write() as cur:
                results.extend(jobs.insert_block(cur, self._now(cur), chunk))
        return results

    def dequeue(
        self, queues: Sequence[str], worker_id: str, count: int, lease_seconds: float
    ) -> list[LeasedJob]:
        """Lease up to ``count`` pending jobs, queue by queue in the order given."""
        if count <= 0 or not queues:
            return []
        leased: list[LeasedJob] = []
        with self._db.write() as cur:
            now = self._now(cur)
            moves: list[batches.Move] = []
            params: dict[str, Any] = {"worker": enc(worker_id), "now": now,
                                      "expires": now + lease_seconds}
            for queue in dict.fromkeys(queues):
                need = count - len(leased)
                if need <= 0:
                    break
                look = cur.execute(_LOOK, {"queue": queue, "now": now}).fetchone()
                paused, gated, expiring = look if look else (False, False, False)
                if paused:
                    continue
                if expiring:
                    expired = cur.execute(_EXPIRE, (queue, now)).fetchall()
                    moves += jobs.move(cur, now, expired, JobState.DEAD, EventKind.EXPIRED,
                                       _EXPIRED_MESSAGE, f"message = %(msg)s, {jobs.FINISH}")
                for row in self._lease(cur, now, queue, need, gated, params):
                    job = _leased(row)
                    leased.append(job)
                    if job.batch_id:
                        moves.append((job.batch_id, "pending", "active"))
            batches.apply(cur, now, moves, jobs.insert)
        return leased

    def _lease(self, cur: psycopg.Cursor[Any], now: float, queue: str, need: int, gated: bool,
               params: dict[str, Any]) -> list[Any]:
        if gated:
            flow.gate_lock(cur)
            ids = flow.pick(cur, now, queue, need)
            if not ids:
                return []
            rows = cur.execute(_LEASE_IDS, {**params, "ids": ids}).fetchall()
        else:
            rows = cur.execute(_LEASE_FIRST, {**params, "queue": queue, "count": need}).fetchall()
        rows.sort(key=lambda r: (r[11], r[12]))
        return list(rows)

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until work may be ready on ``queues`` (see ``wakeup.py``)."""
        names = list(queues)

        @reads
        def has_work(self: PostgresStorage) -> bool:
            return self._db.read().execute(_HAS_WORK, (names,)).fetchone() is not None

        return self._listener.wait(names, lambda: has_work(self), timeout)

    def ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Apply outcomes, fenced by lease token, all in one transaction."""
        if not acks:
            return []
        with self._db.write() as cur:
            now = self._now(cur)
            applied, moves = ack_sql.apply(cur, now, acks)
            batches.apply(cur, now, moves, jobs.insert)
        return applied

    def log(self, job_id: str, token: str, events: Sequence[Event],
            progress: tuple[int, int] | None = None) -> bool:
        """Append a running job's messages and progress, fenced by its lease token."""
        text = "".join(e.to_json() + "\n" for e in events)
        with self._db.write() as cur:
            updated = cur.execute(
                "UPDATE jobs SET events = events || %s, progress = coalesce(%s, progress) "
                "WHERE id = %s AND token = %s AND state = 'active'",
                (text, json.dumps(list(progress)) if progress else None, job_id, token),
            ).rowcount
        return bool(updated)

    def heartbeat(
        self, info: WorkerInfo, leases: Mapping[str, str], lease_seconds: float
    ) -> HeartbeatReply:
        """Register the worker, extend its leases, report lost/cancelled jobs and a command."""
        with self._db.write() as cur:
            now = self._now(cur)
            wire = {**info.to_wire(), "last_seen": now}
            found = cur.execute("SELECT command FROM workers WHERE id = %s FOR UPDATE",
                                (enc(info.id),)).fetchone()
            cur.execute(
                "INSERT INTO workers (id, info, last_seen) VALUES (%(id)s, %(info)s, %(now)s) "
                "ON CONFLICT (id) DO UPDATE SET info = excluded.info, "
                "last_seen = excluded.last_seen, command = NULL",
                {"id": enc(info.id), "info": json.dumps(wire), "now": now},
            )
            command = found[0] if found else None
            ids = sorted(leases)
            held = cur.execute(
                "UPDATE jobs SET lease_expires_at = %s FROM unnest(%s::text[], %s::text[]) "
                "AS u(id, token) WHERE jobs.id = u.id AND jobs.token = u.token "
                "AND jobs.state = 'active' RETURNING jobs.id, jobs.cancel_requested",
                (now + lease_seconds, ids, [leases[i] for i in ids]),
            ).fetchall() if leases else []
        return HeartbeatReply(
            lost=frozenset(set(leases) - {r[0] for r in held}),
            cancel=frozenset(r[0] for r in held if r[1]),
            command=command,
        )

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry."""
        with self._db.write() as cur:
            cur.execute("DELETE FROM workers WHERE id = %s", (enc(worker_id),))

    def check_server(self) -> list[str]:
        """Warnings about server settings that can lose jobs: ``fsync`` or
        ``full_page_writes`` off (a crash of the machine can corrupt the database).
        ``synchronous_commit=off`` is not warned about: it loses at most the last moments of
        commits, as Redis's ``appendfsync everysec`` does."""
        with self._db.outages():
            row = self._db.read().execute(_SERVER_CHECK).fetchone() or ("", "", "", True)
        names = ("fsync", "full_page_writes")
        found = [f"PostgreSQL runs with {name}=off: a crash of its machine can lose or corrupt "
                 "jobs" for name, value in zip(names, row[:2], strict=True) if value == "off"]
        if row[2] == "on" or not row[3]:
            found.append("this PostgreSQL role cannot write conveyor's tables (read-only "
                         "transaction or no INSERT/UPDATE on them): no job can be taken")
        return found

    def bind(self, connection: object) -> PostgresStorage:
        """This storage writing in the open transaction of your own connection (``bound.py``)."""
        return PostgresStorage(self._db.settings, self._binder.database(connection), self._clock)

    def close(self) -> None:
        """Release this process's connections. Idempotent."""
        self._listener.close()
        self._db.close()


def _leased(row: Sequence[Any]) -> LeasedJob:
    return LeasedJob(
        id=row[0], name=row[1], queue=row[2], payload=row[3], token=row[4],
        attempt=row[5], errors=row[6], max_retries=row[7], timeout=row[8], batch_id=row[9],
        recoveries=row[10],
    )
