"""taskiq with taskiq-redis ``ListQueueBroker``: ``taskiq worker --workers P
--max-async-tasks C``. Results (``RedisAsyncResultBackend``) only matter for the tracked form.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import body
from common import QUEUE, Peer, apaced, main
from taskiq_redis import ListQueueBroker, RedisAsyncResultBackend

_url = os.environ.get("BENCH_DONE_URL", "redis://")
broker = ListQueueBroker(_url, queue_name=QUEUE).with_result_backend(
    RedisAsyncResultBackend(_url, result_ex_time=600))


@broker.task(task_name="job")
async def job(kind: str, ts: float) -> None:
    """The shared body."""
    await body.arun(kind, ts)


class TaskiqPeer(Peer):
    """taskiq on Redis."""

    name = "taskiq"
    module = "taskiq"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(broker.startup())

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        self.loop.run_until_complete(self._each(kind, n, interval))

    async def _each(self, kind: str, n: int, interval: float) -> None:
        async for _ in apaced(n, interval):
            await job.kiq(kind, time.time())

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        return [[sys.executable, "-m", "taskiq", "worker", "taskiq_peer:broker", "--workers",
                 str(processes), "--max-async-tasks", str(concurrency), "--log-level", "WARNING"]]

    def close(self) -> None:
        self.loop.run_until_complete(broker.shutdown())


if __name__ == "__main__":
    main(TaskiqPeer)
