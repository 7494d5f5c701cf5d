"""Huey with RedisHuey (blocking BRPOP): one ``huey_consumer -k thread -w C`` per process.

The periodic scheduler and health checks are off (``-n -C``); results are stored only when a
task returns a value, which only the tracked task does.
"""

from __future__ import annotations

import os
import sys
import time

import body
from common import QUEUE, Peer, main, paced
from huey import RedisHuey

huey = RedisHuey(QUEUE, url=os.environ.get("BENCH_DONE_URL", "redis://"))


@huey.task(name="job")
def job(kind: str, ts: float) -> None:
    """The shared body."""
    body.run(kind, ts)


@huey.task(name="job_tracked")
def job_tracked(kind: str, ts: float) -> int:
    """The shared body; its return value is kept in the result store."""
    body.run(kind, ts)
    return 1


class HueyPeer(Peer):
    """Huey on Redis."""

    name = "huey"
    module = "huey"

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        task = job_tracked if kind == "tracked" else job
        for _ in paced(n, interval):
            task(kind, time.time())

    def batch(self, n: int, timeout: float) -> None:
        group = job_tracked.map([("noop", 0.0)] * n)
        group.get(blocking=True, timeout=timeout)

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        return [[sys.executable, "-m", "huey.bin.huey_consumer", "huey_peer.huey", "-k", "thread",
                 "-w", str(concurrency), "-n", "-C", "-q"] for _ in range(processes)]


if __name__ == "__main__":
    # Huey names tasks after their module: enqueue through ``huey_peer`` (what the consumer
    # imports), not ``__main__``, or the consumer finds no such task.
    import huey_peer

    main(huey_peer.HueyPeer)
