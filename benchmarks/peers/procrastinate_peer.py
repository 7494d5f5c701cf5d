"""procrastinate on the suite's PostgreSQL (database ``procrastinate``): P x ``procrastinate
worker --concurrency C``.

Settings: ``PsycopgConnector`` (psycopg 3 pool, ``max_size`` C + 2 so every job slot and the
fetcher have a connection), ``LISTEN/NOTIFY`` on (its default), ``--delete-jobs successful``
(a finished job leaves no row) except where a workload needs per-job status (``storage`` and
``batch``: ``never``, procrastinate's default). The task is ``async def`` (procrastinate is an
asyncio engine: the I/O bodies run as coroutines, like arq's and SAQ's).

procrastinate has no group API: W4 defers the 5,000 jobs with ``batch_defer`` onto a queue of
their own and polls ``list_queues`` (its per-queue count of jobs by status) until all succeeded.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import body
from common import QUEUE, Peer, Unsupported, apaced, main, pg_bytes, pg_reset, pg_url
from procrastinate import App, PsycopgConnector

BATCH_QUEUE = "bench_batch"
_conc = int(os.environ.get("BENCH_CONCURRENCY", "10"))
app = App(connector=PsycopgConnector(
    conninfo=pg_url("procrastinate") if "BENCH_PG_URL" in os.environ else "",
    min_size=2, max_size=_conc + 2))


@app.task(name="job", queue=QUEUE)
async def job(kind: str, ts: float) -> None:
    """The shared body."""
    await body.arun(kind, ts)


class ProcrastinatePeer(Peer):
    """procrastinate (psycopg 3, asyncio worker)."""

    name = "procrastinate"
    module = "procrastinate"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.db = pg_url("procrastinate")
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(app.open_async())

    def reset(self) -> None:
        pg_reset(self.db, "procrastinate_jobs", lambda: self.loop.run_until_complete(
            app.schema_manager.apply_schema_async()))

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        self.loop.run_until_complete(self._each(kind, n, interval))

    async def _each(self, kind: str, n: int, interval: float) -> None:
        async for _ in apaced(n, interval):
            await job.defer_async(kind=kind, ts=time.time())

    def enqueue_bulk(self, kind: str, n: int) -> None:
        self.loop.run_until_complete(job.batch_defer_async(*[{"kind": kind, "ts": 0.0}] * n))

    def batch(self, n: int, timeout: float) -> None:
        self.loop.run_until_complete(self._batch(n, timeout))

    async def _batch(self, n: int, timeout: float) -> None:
        await job.configure(queue=BATCH_QUEUE).batch_defer_async(
            *[{"kind": "noop", "ts": 0.0}] * n)
        deadline = time.monotonic() + timeout
        while True:
            queues = await app.job_manager.list_queues_async(queue=BATCH_QUEUE)
            if sum(q["succeeded"] for q in queues) >= n:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("batch not complete")
            await asyncio.sleep(0.01)

    def preload_batch(self, n: int) -> None:
        raise Unsupported("no batch API")

    def storage_bytes(self) -> int | None:
        return pg_bytes(self.db, "public")

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        keep = self.cfg["workload"] in ("storage", "batch")
        os.environ["BENCH_CONCURRENCY"] = str(concurrency)
        queues = f"{QUEUE},{BATCH_QUEUE}"
        return [[sys.executable, "-m", "procrastinate", "--app=procrastinate_peer.app",
                 "--log-level=warning", "worker", "--concurrency", str(concurrency),
                 "--queues", queues, "--delete-jobs", "never" if keep else "successful"]
                for _ in range(processes)]

    def close(self) -> None:
        self.loop.run_until_complete(app.close_async())


if __name__ == "__main__":
    # enqueue through ``procrastinate_peer`` (what the worker imports), not ``__main__``
    import procrastinate_peer

    main(procrastinate_peer.ProcrastinatePeer)
