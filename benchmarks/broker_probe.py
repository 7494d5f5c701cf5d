"""Drain through a broker against a drain from the store alone, one worker in this process.

``python -m benchmarks.broker_probe [--jobs 10000] [--store sqlite] [--broker memory://]
[-c 8] [--rounds 2]``: stores ``--jobs`` no-op jobs, starts one worker (threads, this
process) with and without the broker, and prints jobs/s from the worker's start until every
job succeeded, and the process CPU per job. Rounds alternate the two.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import uuid

from conveyor import Conveyor, JobState
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def drain(store: str, broker: str | None, jobs: int, concurrency: int) -> tuple[float, float]:
    """(jobs/s, CPU µs per job) for one drain of ``jobs`` no-op jobs."""
    with tempfile.TemporaryDirectory() as tmp:
        url = "memory://" if store == "memory" else f"sqlite:///{tmp}/probe.db"
        app = Conveyor(url, broker=f"{broker}{uuid.uuid4().hex}" if broker else None)

        @app.job(name="probe.noop")
        def noop() -> None:
            return None

        noop.enqueue_many(([] for _ in range(jobs)), return_refs=False)
        launcher = Launcher(app, WorkerConfig(concurrency=concurrency, relay_window=0))
        cpu, start = _cpu(), time.perf_counter()
        launcher.start()
        try:
            while app.storage.count_jobs(state=JobState.SUCCEEDED) < jobs:
                time.sleep(0.01)
        finally:
            elapsed, used = time.perf_counter() - start, _cpu() - cpu
            launcher.stop(5)
            app.close()
    return jobs / elapsed, used / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.broker_probe")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--store", default="sqlite")
    parser.add_argument("--broker", default="memory://")
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print("| round | worker | jobs/s | CPU µs/job |\n|---|---|---|---|")
    for n in range(args.rounds):
        for label, broker in (("store only", None), (f"+ {args.broker}", args.broker)):
            rate, cpu = drain(args.store, broker, args.jobs, args.concurrency)
            print(f"| {n + 1} | {args.store} {label} | {rate:,.0f} | {cpu:.0f} |", flush=True)


if __name__ == "__main__":
    main()
