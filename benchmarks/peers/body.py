"""The one job body every engine runs, and the completion signal the driver waits for.

Stdlib + redis-py only: it is imported inside every peer's own virtual environment.
Configuration comes from environment variables the adapter sets before starting workers.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis

DONE_KEY = "bench:done"
LAT_KEY = "bench:lat"

_client: Any = None
_pid = -1


def client() -> Any:
    """A redis-py client to the benchmark's own redis, one per process (re-made after fork)."""
    global _client, _pid
    if _pid != os.getpid():
        _client = redis.Redis.from_url(os.environ["BENCH_DONE_URL"])
        _pid = os.getpid()
    return _client


def spin(iters: int) -> int:
    """Pure-Python CPU work: the W5 body."""
    acc = 0
    for i in range(iters):
        acc = (acc + i * i) % 1_000_003
    return acc


def run(kind: str, ts: float) -> None:
    """The job: optionally record enqueue-to-start latency, do the work, count completion."""
    if kind == "lat":
        client().rpush(LAT_KEY, repr(time.time() - ts))
    elif kind == "sleep":
        time.sleep(float(os.environ.get("BENCH_SLEEP", "0.02")))
    elif kind == "cpu":
        spin(int(os.environ.get("BENCH_CPU_ITERS", "100000")))
    client().incr(DONE_KEY)


async def arun(kind: str, ts: float) -> None:
    """The same job for asyncio engines: the I/O wait is ``asyncio.sleep``, the rest identical."""
    if kind == "sleep":
        await asyncio.sleep(float(os.environ.get("BENCH_SLEEP", "0.02")))
        client().incr(DONE_KEY)
    else:
        run(kind, ts)
