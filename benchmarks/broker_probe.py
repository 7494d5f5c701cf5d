"""Drain through a broker against a drain from the store alone, one worker in this process.

``python -m benchmarks.broker_probe [--jobs 10000] [--store sqlite] [--broker memory|rabbitmq]
[-c 8] [--rounds 2]``: stores ``--jobs`` no-op jobs, starts one worker (threads, this process)
with and without the broker, and prints jobs/s from the worker's start until every job
succeeded, and this process's CPU per job. Rounds alternate the two. ``rabbitmq`` starts a
private node (tests/support/rabbitmq.py).
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import tempfile
import time
import uuid

from tests.support.rabbitmq import RabbitServer

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
        tag = uuid.uuid4().hex[:10]
        target = None if broker is None else (
            f"memory://{tag}" if broker == "memory" else f"{broker}?prefix=p{tag}")
        app = Conveyor(url, broker=target)

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
    parser.add_argument("--broker", default="memory", choices=("memory", "rabbitmq"))
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        broker = "memory"
        if args.broker == "rabbitmq":
            broker = stack.enter_context(RabbitServer()).url
        print("| round | worker | jobs/s | CPU µs/job |\n|---|---|---|---|")
        for n in range(args.rounds):
            for label, via in (("store only", None), (f"+ {args.broker}", broker)):
                rate, cpu = drain(args.store, via, args.jobs, args.concurrency)
                print(f"| {n + 1} | {args.store} {label} | {rate:,.0f} | {cpu:.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
