"""Hand-written minimal Redis queue: the ceiling of a Python redis client.

Variant ``brpop``: LPUSH one job per call, workers BRPOP one job per round trip.
Variant ``batch``: LPUSH in pipelines of 1,000, workers pop up to 100 jobs per round trip
(RPOP with a count, BRPOP only when the list is empty). No acks, no retries, no state.

The worker has C slots like every engine: C threads running the body for sync bodies, C asyncio
tasks on one event loop (``redis.asyncio``) for the async ones (``body.ASYNC_KINDS``). This is
the raw queue every I/O workload (W0) is reported against: the same body with nothing of an
engine around it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

import body
import redis.asyncio as aredis
from common import QUEUE, Peer, main, paced

import redis

KEY = "raw:" + QUEUE


class RawRedis(Peer):
    """LPUSH/BRPOP with redis-py (hiredis parser)."""

    name = "redis-py"
    module = "redis"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.r = redis.Redis.from_url(self.url)
        self.variant = cfg.get("variant", "brpop")

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        lpush = self.r.lpush
        for _ in paced(n, interval):
            lpush(KEY, json.dumps([kind, time.time()]))

    def enqueue_bulk(self, kind: str, n: int) -> None:
        if self.variant != "batch":
            return super().enqueue_bulk(kind, n)
        msg = json.dumps([kind, 0.0])
        pipe = self.r.pipeline(transaction=False)
        for start in range(0, n, 1000):
            pipe.lpush(KEY, *([msg] * min(1000, n - start)))
        pipe.execute()
        return None

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        mode = "asyncio" if self.cfg.get("body") in body.ASYNC_KINDS else "worker"
        return [[sys.executable, __file__, mode, self.url, self.variant, str(concurrency)]
                for _ in range(processes)]


def work(url: str, variant: str) -> None:
    """One worker thread: pop, run the shared body, repeat."""
    r = redis.Redis.from_url(url)
    while True:
        if variant == "batch":
            msgs = r.rpop(KEY, 100)
            if not msgs:
                got = r.brpop([KEY], 1)
                msgs = [got[1]] if got else []
        else:
            got = r.brpop([KEY], 1)
            msgs = [got[1]] if got else []
        for m in msgs:
            kind, ts = json.loads(m)
            body.run(kind, ts)


def worker(url: str, variant: str, threads: int) -> None:
    """A worker process with ``threads`` popping threads."""
    ts = [threading.Thread(target=work, args=(url, variant), daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


async def awork(r: Any) -> None:
    """One asyncio slot: BRPOP, await the shared body, repeat."""
    while True:
        got = await r.brpop([KEY], 1)
        if got:
            kind, ts = json.loads(got[1])
            await body.arun(kind, ts)


async def aworker(url: str, slots: int) -> None:
    """A worker process with ``slots`` popping tasks on one event loop (one client, whose
    pool gives each blocked BRPOP its own connection)."""
    r = aredis.Redis.from_url(url, max_connections=slots + 1)
    await asyncio.gather(*(awork(r) for _ in range(slots)))


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "asyncio":
        asyncio.run(aworker(sys.argv[2], int(sys.argv[4])))
    else:
        main(RawRedis)
