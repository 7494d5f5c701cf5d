"""SAQ on Redis: asyncio worker with ``concurrency`` C, ``saq --workers P``.

Completed jobs are kept for SAQ's default ``ttl`` (600 s) only in the tracked form; the plain
job uses ``ttl=-1`` (delete on completion).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import body
from common import QUEUE, Peer, apaced, main
from saq import Queue

queue = Queue.from_url(os.environ.get("BENCH_DONE_URL", "redis://"), name=QUEUE)


async def job(ctx: dict[str, Any], *, kind: str, ts: float) -> None:
    """The shared body."""
    await body.arun(kind, ts)


settings = {
    "queue": queue,
    "functions": [job],
    "concurrency": int(os.environ.get("BENCH_CONCURRENCY", "10")),
}


class SaqPeer(Peer):
    """SAQ on Redis."""

    name = "saq"
    module = "saq"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(queue.connect())

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        self.loop.run_until_complete(self._each(kind, n, interval))

    async def _each(self, kind: str, n: int, interval: float) -> None:
        ttl = 600 if kind == "tracked" else -1
        async for _ in apaced(n, interval):
            await queue.enqueue("job", kind=kind, ts=time.time(), ttl=ttl)

    def batch(self, n: int, timeout: float) -> None:
        items = [{"kind": "noop", "ts": 0.0} for _ in range(n)]
        self.loop.run_until_complete(
            queue.map("job", items, timeout=timeout, poll_interval=0.01))

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        os.environ["BENCH_CONCURRENCY"] = str(concurrency)
        return [[sys.executable, "-m", "saq", "saq_peer.settings", "--workers", str(processes),
                 "--quiet"]]

    def close(self) -> None:
        self.loop.run_until_complete(queue.disconnect())


if __name__ == "__main__":
    main(SaqPeer)
