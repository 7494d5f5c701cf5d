"""arq: asyncio worker, ``max_jobs`` = concurrency, one ``arq`` process per worker process.

arq polls its queue (a sorted set) every ``poll_delay`` (default 0.5 s); the benchmark uses
10 ms, the low end of what its docs suggest for latency-sensitive work. Results: kept only
for the tracked form (``keep_result=0`` otherwise).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import body
from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import func
from common import QUEUE, Peer, apaced, main


async def job(ctx: dict[str, Any], kind: str, ts: float) -> None:
    """The shared body."""
    await body.arun(kind, ts)


class WorkerSettings:
    """``arq arq_peer.WorkerSettings``."""

    functions = [func(job, name="job", keep_result=0), func(job, name="job_tracked")]
    redis_settings = RedisSettings.from_dsn(os.environ.get("BENCH_DONE_URL", "redis://"))
    queue_name = QUEUE
    max_jobs = int(os.environ.get("BENCH_CONCURRENCY", "10"))
    poll_delay = 0.01
    handle_signals = True


class ArqPeer(Peer):
    """arq on Redis."""

    name = "arq"
    module = "arq"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.loop = asyncio.new_event_loop()
        self.pool = self.loop.run_until_complete(
            create_pool(RedisSettings.from_dsn(self.url), default_queue_name=QUEUE))

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        self.loop.run_until_complete(self._each(kind, n, interval))

    async def _each(self, kind: str, n: int, interval: float) -> None:
        name = "job_tracked" if kind == "tracked" else "job"
        async for _ in apaced(n, interval):
            await self.pool.enqueue_job(name, kind, time.time())

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        os.environ["BENCH_CONCURRENCY"] = str(concurrency)
        return [[sys.executable, "-m", "arq", "arq_peer.WorkerSettings"]
                for _ in range(processes)]

    def close(self) -> None:
        self.loop.run_until_complete(self.pool.aclose())


if __name__ == "__main__":
    main(ArqPeer)
