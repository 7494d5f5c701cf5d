"""PostgreSQL's native asyncio path: the ``enqueue`` function and the record read called on
a psycopg ``AsyncConnection`` (one per event loop), the same statements and results as the
blocking path (``jobs.insert``, ``get_job``), and result waiters woken by ``NOTIFY``. Jobs
that need several statements in one transaction (debounce, aggregation, workflow nodes) and
a storage bound to the application's transaction go through the blocking path in a thread
(``ThreadedAsync``)."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from conveyor.core.job import EnqueueResult, JobRecord, JobSpec
from conveyor.errors import StorageError
from conveyor.storage.aio import ThreadedAsync, Waiter, per_loop
from conveyor.storage.postgres import jobs
from conveyor.storage.postgres.clock import ServerClock
from conveyor.storage.postgres.connection import Connections, Database, translate
from conveyor.storage.postgres.notices import Notices

__all__ = ["PostgresAsync"]

_CHUNK = 5000  # as ENQUEUE_CHUNK: jobs per statement


def _native(spec: JobSpec) -> bool:
    flow = spec.flow
    return spec.node is None and (flow is None or not (flow.fold_key or flow.group_key))


class PostgresAsync:
    """``aenqueue``, ``aget_job`` and ``afinished`` on an ``AsyncConnection``: a part of
    ``PostgresStorage``, handing what it cannot do natively to ``threaded`` (the blocking
    calls in a thread)."""

    def __init__(self, db: Database, clock: ServerClock, notices: Notices, schema: str | None,
                 threaded: ThreadedAsync) -> None:
        self._db = db
        self._clock = clock
        self._notices = notices
        self._schema = schema
        self._threaded = threaded

    async def aenqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """``enqueue`` for asyncio code: natively, one statement per chunk."""
        if not isinstance(self._db, Connections) or not all(_native(s) for s in specs):
            return await self._threaded.aenqueue(specs)
        conn = await self._aconn()
        results: list[EnqueueResult] = []
        try:
            for start in range(0, len(specs), _CHUNK):
                chunk = specs[start:start + _CHUNK]
                statement, params = jobs.insert_call(self._clock.arg(), chunk, self._schema)
                async with conn.cursor() as cur:
                    await cur.execute(statement, params)
                    results += jobs.results(await cur.fetchall())
        except psycopg.Error as exc:
            self._aforget()
            raise translate(exc, self._db.where) from exc
        return results

    async def aget_job(self, job_id: str) -> JobRecord | None:
        """``get_job`` for asyncio code: natively, one statement."""
        if not isinstance(self._db, Connections):
            return await self._threaded.aget_job(job_id)
        conn = await self._aconn()
        try:
            async with conn.cursor() as cur:
                await cur.execute(jobs.GET_JOB, (job_id,))
                row = await cur.fetchone()
        except psycopg.Error as exc:
            self._aforget()
            raise translate(exc, self._db.where) from exc
        return jobs.record(row[:-1], row[-1]) if row else None

    @asynccontextmanager
    async def afinished(self, job_id: str, queue: str) -> AsyncIterator[Waiter]:
        """Wake-ups when ``job_id`` ends: the process's shared connection LISTENs on
        'conveyor_d_<schema>' (``notices.py``) and a ``result_waiters`` row asks the acks to
        NOTIFY it (migrations/010_result_waiters.sql, functions/wake_waiters.sql)."""
        async with self._notices.awatch(self._db.settings.done_channel, job_id) as waiter:
            await self._waiter_row("INSERT INTO result_waiters (job_id, since) VALUES (%s, "
                                   "extract(epoch FROM clock_timestamp()))", job_id)
            try:
                yield waiter
            finally:
                with contextlib.suppress(StorageError):  # the row goes with its job's trim
                    await self._waiter_row(
                        "DELETE FROM result_waiters WHERE ctid = (SELECT ctid FROM "
                        "result_waiters WHERE job_id = %s LIMIT 1)", job_id)

    async def _waiter_row(self, statement: str, job_id: str) -> None:
        conn = await self._aconn()
        try:
            await conn.execute(statement, (job_id,))
        except psycopg.Error as exc:
            self._aforget()
            raise translate(exc, self._db.where) from exc

    async def _aconn(self) -> psycopg.AsyncConnection[Any]:
        loop = asyncio.get_running_loop()
        conns = self._aconns()
        conn = conns.get(loop)
        if conn is not None and not conn.closed:
            return conn
        # One opener per loop: a burst of calls on a new loop (a web app's first requests)
        # would otherwise each open a connection while the first one connects, past the
        # server's max_connections, and keep only the last.
        openers = self._aopeners()
        opener = openers.get(loop)
        if opener is None:
            opener = openers[loop] = asyncio.Lock()
        async with opener:
            conn = conns.get(loop)
            if conn is None or conn.closed:
                settings = self._db.settings
                try:
                    conn = await psycopg.AsyncConnection.connect(
                        settings.conninfo, autocommit=True, application_name="conveyor")
                    await conn.execute(f'SET search_path TO "{settings.schema}"')
                except psycopg.Error as exc:
                    raise translate(exc, self._db.where) from exc
                conns[loop] = conn
        return conn

    def _aconns(self) -> weakref.WeakKeyDictionary[Any, psycopg.AsyncConnection[Any]]:
        return per_loop(self, "_async_conns")

    def _aopeners(self) -> weakref.WeakKeyDictionary[Any, asyncio.Lock]:
        return per_loop(self, "_async_openers")

    def _aforget(self) -> None:
        """Drop this loop's connection after an error (the next call opens a new one)."""
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to forget
            self._aconns().pop(asyncio.get_running_loop(), None)

    async def aclose(self) -> None:
        """Close this loop's connection."""
        conn = self._aconns().pop(asyncio.get_running_loop(), None)
        if conn is not None:
            await conn.close()
