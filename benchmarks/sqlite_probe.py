"""Throughput of the SQLite backend (a benchmark, not a test: it asserts nothing about time).

    python -m benchmarks.sqlite_probe [--jobs 100000] [--batch 100]

Prints: one-by-one enqueue rate, bulk enqueue time, and the dequeue+ack loop rate of one
process draining no-op jobs (``batch`` jobs leased and acknowledged per transaction), each by
wall time and by this process's CPU time (steadier on a busy machine); then the latency from
an enqueue in another process to the lease in a process blocked in ``wait``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from conveyor.core.job import Ack, JobSpec, Outcome
from conveyor.storage.sqlite.storage import open_sqlite


def _specs(n: int, prefix: str) -> list[JobSpec]:
    return [JobSpec(id=f"{prefix}{i:08d}", name="bench.noop", queue="default",
                    payload=f'{{"a":[{i}],"k":{{}}}}') for i in range(n)]


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _rate(n: int, start: tuple[float, float]) -> str:
    wall, cpu = (a - b for a, b in zip(_now(), start, strict=True))
    return f"{n / wall:,.0f} jobs/s wall, {n / cpu:,.0f} jobs/s cpu"


def _enqueue_slowly(url: str, n: int) -> None:
    store = open_sqlite(url)
    for i in range(n):
        time.sleep(0.05)
        payload = json.dumps({"a": [], "k": {}, "m": {"t": time.time()}})
        store.enqueue([JobSpec(id=f"x{i}", name="bench.noop", queue="lat", payload=payload)])
    store.close()


def wake_latency(url: str, n: int = 30) -> str:
    """Median and max time from an enqueue in another process to the lease here."""
    store = open_sqlite(url)
    child = multiprocessing.get_context("fork").Process(target=_enqueue_slowly, args=(url, n))
    child.start()
    seen: list[float] = []
    while len(seen) < n:
        jobs = store.dequeue(["lat"], "bench", 10, 60.0)
        seen += [time.time() - json.loads(j.payload)["m"]["t"] for j in jobs]
        if not jobs:
            store.wait(["lat"], 1.0)
    child.join()
    store.close()
    return f"median {1000 * statistics.median(seen):.1f} ms, max {1000 * max(seen):.1f} ms"


def main() -> None:
    """Run the three measurements on a fresh file in a temporary directory."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_sqlite(f"sqlite:///{Path(tmp) / 'bench.db'}")
        start = _now()
        for spec in _specs(args.single, "s"):
            store.enqueue([spec])
        print("enqueue one by one: " + _rate(args.single, start))
        specs = _specs(args.jobs, "b")
        start = _now()
        store.enqueue(specs)
        wall, cpu = (a - b for a, b in zip(_now(), start, strict=True))
        print(f"bulk enqueue of {args.jobs:,}: {wall:.2f} s wall, {cpu:.2f} s cpu")
        done = 0
        start = _now()
        while True:
            jobs = store.dequeue(["default"], "bench", args.batch, 60.0)
            if not jobs:
                break
            store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs])
            done += len(jobs)
        print(f"dequeue+ack, {args.batch} per call, {done:,} jobs: " + _rate(done, start))
        store.close()
        url = f"sqlite:///{Path(tmp) / 'latency.db'}"
        print("enqueue in another process -> leased here: " + wake_latency(url))


if __name__ == "__main__":
    main()
