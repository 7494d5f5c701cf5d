"""PgQueuer on the suite's PostgreSQL (database ``pgqueuer``): P x ``pgqueuer.run``.

Each worker process runs ``pgqueuer.run(factory, ...)``, what ``pgq run`` runs: the CLI of
PgQueuer 1.6.0 fails at start with this typer (``setup_fancy_logger`` gets the log level as a
``str``), so the adapter calls the documented function the CLI wraps.

Settings: asyncpg (PgQueuer's own first driver), ``pgq install --durability balanced`` (the
queue table logged, its log and statistics tables unlogged: its documented faster setting that
still keeps every queued job through a crash), ``batch_size`` C/2 and
``max_concurrent_tasks`` C (PgQueuer requires the cap to be at least twice the batch), so a
worker runs at most C jobs at once like every engine here. The entrypoint is ``async def``
(PgQueuer is an asyncio engine). A finished job leaves the queue table for ``pgqueuer_log``.

PgQueuer has no group API: W4 enqueues the 5,000 jobs in one bulk call and polls
``Queries.job_status`` for their ids until every one is ``successful``, every 50 ms: the
debounce of PgQueuer's own ``CompletionWatcher`` (one status query per window), and its
faster setting here — reading 5,000 statuses every 10 ms, as this adapter did before
2026-11-27, loaded the server it shares (0.90–1.07 s against 0.88–0.98 s, `--only w4_batch
--peers pgqueuer --rounds 3`, alternated twice).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import body
import pgqueuer
from common import QUEUE, Peer, apaced, main, pg_bytes, pg_reset, pg_url
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

ENTRYPOINT = QUEUE


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    """The worker's factory (an async context manager, as PgQueuer 1.6 requires)."""
    conn = await asyncpg.connect(pg_url("pgqueuer"))
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint(ENTRYPOINT)
    async def job(job: Job) -> None:
        kind, ts = json.loads(job.payload or b"[]")
        await body.arun(kind, ts)

    try:
        yield pgq
    finally:
        await conn.close()


class PgQueuerPeer(Peer):
    """PgQueuer (asyncpg)."""

    name = "pgqueuer"
    module = "pgqueuer"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.db = pg_url("pgqueuer")
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(self.db))
        self.queries = Queries(AsyncpgDriver(self.conn))

    def reset(self) -> None:
        pg_reset(self.db, "pgqueuer", lambda: subprocess.run(
            [sys.executable, "-m", "pgqueuer", "--pg-dsn", self.db, "install",
             "--durability", "balanced"], check=True, capture_output=True))

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        self.loop.run_until_complete(self._each(kind, n, interval))

    async def _each(self, kind: str, n: int, interval: float) -> None:
        async for _ in apaced(n, interval):
            await self.queries.enqueue(ENTRYPOINT, json.dumps([kind, time.time()]).encode())

    def enqueue_bulk(self, kind: str, n: int) -> None:
        self.loop.run_until_complete(self._bulk(kind, n))

    async def _bulk(self, kind: str, n: int) -> list[Any]:
        payload = json.dumps([kind, 0.0]).encode()
        return list(await self.queries.enqueue([ENTRYPOINT] * n, [payload] * n, [0] * n))

    def batch(self, n: int, timeout: float) -> None:
        self.loop.run_until_complete(self._batch(n, timeout))

    async def _batch(self, n: int, timeout: float) -> None:
        ids = await self._bulk("noop", n)
        deadline = time.monotonic() + timeout
        while True:
            statuses = await self.queries.job_status(ids)
            if sum(status == "successful" for _, status in statuses) >= n:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("batch not complete")
            await asyncio.sleep(0.05)

    def storage_bytes(self) -> int | None:
        return pg_bytes(self.db, "public")

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        batch = max(1, concurrency // 2)
        return [[sys.executable, __file__, "worker", str(batch),
                 str(max(concurrency, 2 * batch))] for _ in range(processes)]

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        asyncio.run(pgqueuer.run("pgqueuer_peer:create", batch_size=int(sys.argv[2]),
                                 max_concurrent_tasks=int(sys.argv[3])))
    else:
        main(PgQueuerPeer)
