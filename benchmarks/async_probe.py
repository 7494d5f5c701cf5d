"""asyncio probe (a benchmark, not a test: run it by hand):

    python -m benchmarks.async_probe [--jobs 2000] [--concurrency 50]

For SQLite, Redis and PostgreSQL (private servers started here), from one event loop:

* ``aenqueue`` one at a time (``--jobs``) and ``--concurrency`` at once (``asyncio.gather``),
  beside the blocking ``enqueue`` sent to a thread (``asyncio.to_thread``), jobs/s;
* how soon ``await ref.aresult()`` returns once a worker thread takes the job (lease, run,
  ack), median of 50: woken by the store (Redis, PostgreSQL) or reading with its backoff;
* on PostgreSQL, what ``wake_waiters`` adds to an ack statement when nobody waits.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from typing import Any

import psycopg

from benchmarks.servers import PostgresBench, RedisServer
from conveyor import Conveyor
from conveyor.testing import drain


def make_app(url: str) -> Conveyor:
    """One job that does nothing."""
    app = Conveyor(url)

    @app.job(name="probe.noop")
    def noop(n: int) -> int:
        return n

    return app


async def rates(app: Conveyor, jobs: int, concurrency: int) -> dict[str, float]:
    """jobs/s of each way to enqueue from a loop."""
    fn = app.registry.get("probe.noop")
    assert fn is not None
    out: dict[str, float] = {}
    start = time.perf_counter()
    for n in range(jobs):
        await fn.aenqueue(n)
    out["aenqueue, one at a time"] = jobs / (time.perf_counter() - start)
    start = time.perf_counter()
    for n in range(jobs):
        await asyncio.to_thread(fn.enqueue, n)
    out["to_thread(enqueue), one at a time"] = jobs / (time.perf_counter() - start)
    start = time.perf_counter()
    for first in range(0, jobs, concurrency):
        await asyncio.gather(*(fn.aenqueue(n) for n in range(first, first + concurrency)))
    out[f"aenqueue, {concurrency} at once"] = jobs / (time.perf_counter() - start)
    start = time.perf_counter()
    for first in range(0, jobs, concurrency):
        await asyncio.gather(*(asyncio.to_thread(fn.enqueue, n)
                               for n in range(first, first + concurrency)))
    out[f"to_thread(enqueue), {concurrency} at once"] = jobs / (time.perf_counter() - start)
    return out


async def wake_latency(app: Conveyor, samples: int = 50) -> float:
    """Median seconds from a worker taking the job (lease, run, ack) to ``aresult``
    returning."""
    fn = app.registry.get("probe.noop")
    assert fn is not None
    drain(app)  # the rate runs' jobs
    gaps: list[float] = []
    for n in range(samples):
        ref = await fn.aenqueue(n)
        waiting = asyncio.create_task(ref.aresult(timeout=30))
        await asyncio.sleep(0.05)  # waiting by now
        started = time.perf_counter()  # the worker takes it now: lease, run, ack
        thread = threading.Thread(target=drain, args=(app,))
        thread.start()
        await waiting
        gaps.append(time.perf_counter() - started)
        thread.join()
    return statistics.median(gaps)


def wake_cost(conninfo: str, schema: str, rounds: int = 20, calls: int = 300) -> float:
    """µs ``wake_waiters`` adds to a statement when nobody waits: rounds of ``SELECT 1`` and
    ``SELECT wake_waiters()`` taken in turn, the median of their differences (this VM's
    timings wander by tens of µs from one second to the next)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')

        def per_call(sql: str) -> float:
            start = time.perf_counter()
            for _ in range(calls):
                conn.execute(sql).fetchone()
            return (time.perf_counter() - start) / calls

        per_call("SELECT wake_waiters()")  # its plans made and cached first
        diffs = [per_call("SELECT wake_waiters()") - per_call("SELECT 1")
                 for _ in range(rounds)]
    return statistics.median(diffs) * 1e6


def probe(name: str, url: str, jobs: int, concurrency: int,
          extra: dict[str, Any] | None = None) -> None:
    """Print one store's figures."""
    app = make_app(url)
    app.storage.queues()

    async def run() -> tuple[dict[str, float], float]:
        try:
            return await rates(app, jobs, concurrency), await wake_latency(app)
        finally:
            await app.aclose()

    figures, latency = asyncio.run(run())
    text = ", ".join(f"{k}: {v:,.0f}/s" for k, v in figures.items())
    more = "".join(f", {k}: {v}" for k, v in (extra or {}).items())
    print(f"{name:<9} {text}; aresult returns {latency * 1000:.1f} ms after a worker took "
          f"the job (median){more}", flush=True)
    app.close()


def main() -> None:
    """Parse the arguments and probe each store."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    probe("sqlite", f"sqlite:///{tempfile.mkdtemp()}/probe.db", args.jobs, args.concurrency)
    server = RedisServer()
    try:
        probe("redis", server.url, args.jobs, args.concurrency)
    finally:
        server.stop()
    pg = PostgresBench()
    try:
        url = f"{pg.url}?schema=probe"
        probe("postgres", url, args.jobs, args.concurrency)
        conninfo = url.split("?")[0]
        cost = wake_cost(conninfo, "probe")
        print(f"postgres  wake_waiters with nobody waiting: {cost:.1f} µs per ack statement",
              flush=True)
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
