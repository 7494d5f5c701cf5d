"""The one job body every engine runs, and the completion signal the driver waits for.

Stdlib + redis-py only: it is imported inside every peer's own virtual environment.
Configuration comes from environment variables the adapter sets before starting workers.

Completion counting must not be what is measured. A synchronous ``INCR`` per job costs one
Redis round trip (~130 µs on a small VM), which alone caps any engine near 4,000 jobs/s and
hides the differences between them. So each worker process counts completions in memory and a
daemon thread adds them to ``bench:done`` every 2 ms (one INCRBY), for every engine alike,
together with the wall-clock times of the first and last completion it covers: the driver
times runs by those, so the flush interval never shows in a result.
Engines that run each job in a process that ends with ``os._exit`` (RQ's forking worker) set
``BENCH_DONE_SYNC=1``: there the forked process cannot flush later, so it counts at once.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from typing import Any

import redis

DONE_KEY = "bench:done"
LAT_KEY = "bench:lat"
SPAN_KEY = "bench:span"
FLUSH_EVERY = 0.002

_client: Any = None
_pid = -1


def client() -> Any:
    """A redis-py client to the benchmark's own redis, one per process (re-made after fork)."""
    global _client, _pid
    if _pid != os.getpid():
        _client = redis.Redis.from_url(os.environ["BENCH_DONE_URL"])
        _pid = os.getpid()
    return _client


class _Counter:
    """Completions of this process not yet reported, with the wall-clock span they cover."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending = 0
        self.first = 0.0
        self.last = 0.0
        self.owner = -1  # pid whose flusher thread runs

    def add(self) -> None:
        now = time.time()
        with self.lock:
            if not self.pending:
                self.first = now
            self.pending += 1
            self.last = now
            if self.owner == os.getpid():
                return
            self.owner = os.getpid()  # first completion in this process: start its flusher
        threading.Thread(target=self._loop, name="bench-done", daemon=True).start()

    def flush(self) -> None:
        with self.lock:
            n, first, last = self.pending, self.first, self.last
            self.pending = 0
        if n:
            report(n, first, last)

    def _loop(self) -> None:
        while True:
            time.sleep(FLUSH_EVERY)
            try:
                self.flush()
            except Exception:  # the driver's redis is gone: the run is over
                return

    def after_fork(self) -> None:
        # The parent's thread does not exist here, and its lock may have been held at fork.
        self.lock = threading.Lock()
        self.pending = 0
        self.owner = -1


def report(n: int, first: float, last: float) -> None:
    """Add ``n`` completions and the span they finished in (the driver times runs by it)."""
    pipe = client().pipeline(transaction=False)
    pipe.incrby(DONE_KEY, n)
    pipe.rpush(SPAN_KEY, f"{first!r} {last!r}")
    pipe.execute()


_counter = _Counter()
os.register_at_fork(after_in_child=_counter.after_fork)
atexit.register(lambda: _counter.flush() if _counter.pending else None)


def done() -> None:
    """Count one completed job."""
    if os.environ.get("BENCH_DONE_SYNC") == "1":
        now = time.time()
        report(1, now, now)
    else:
        _counter.add()


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
    done()


async def arun(kind: str, ts: float) -> None:
    """The same job for asyncio engines: the I/O wait is ``asyncio.sleep``, the rest identical."""
    if kind == "sleep":
        await asyncio.sleep(float(os.environ.get("BENCH_SLEEP", "0.02")))
        done()
    else:
        run(kind, ts)
