"""Throughput of the SQLite backend (a benchmark, not a test: it asserts nothing about time).

    python -m tests.sqlite.bench_sqlite [--jobs 100000] [--batch 100]

Prints: one-by-one enqueue rate, bulk enqueue time, and the dequeue+ack loop rate of one
process draining no-op jobs (``batch`` jobs leased and acknowledged per transaction).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from conveyor.job import Ack, JobSpec, Outcome
from conveyor.storage.sqlite.storage import open_sqlite


def _specs(n: int, prefix: str) -> list[JobSpec]:
    return [JobSpec(id=f"{prefix}{i:08d}", name="bench.noop", queue="default",
                    payload=f'{{"a":[{i}],"k":{{}}}}') for i in range(n)]


def main() -> None:
    """Run the three measurements on a fresh file in a temporary directory."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_sqlite(f"sqlite:///{Path(tmp) / 'bench.db'}")
        start = time.perf_counter()
        for spec in _specs(args.single, "s"):
            store.enqueue([spec])
        elapsed = time.perf_counter() - start
        print(f"enqueue one by one: {args.single / elapsed:,.0f} jobs/s")
        specs = _specs(args.jobs, "b")
        start = time.perf_counter()
        store.enqueue(specs)
        print(f"bulk enqueue of {args.jobs:,}: {time.perf_counter() - start:.2f} s")
        done = 0
        start = time.perf_counter()
        while True:
            jobs = store.dequeue(["default"], "bench", args.batch, 60.0)
            if not jobs:
                break
            store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs])
            done += len(jobs)
        elapsed = time.perf_counter() - start
        print(f"dequeue+ack, {args.batch} per call: {done / elapsed:,.0f} jobs/s ({done:,} jobs)")
        store.close()


if __name__ == "__main__":
    main()
