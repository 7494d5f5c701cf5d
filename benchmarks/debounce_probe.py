"""Debounce probe (a benchmark, not a test: run it by hand):

    python -m benchmarks.debounce_probe [--calls 10000] [--processes 4]

For SQLite, Redis and PostgreSQL (private servers started here): ``--processes`` processes
call one debounced job with one key ``--calls`` times in all, as fast as they can, then a
worker runs what is due. Prints the calls per second, how many jobs were stored (1 is the
point) and how many runs happened (1), and the arguments the run got (one process's last).
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from typing import Any

from benchmarks.servers import PostgresBench, RedisServer
from conveyor import Conveyor, Debounce
from conveyor.testing import drain

WAIT = 1.0
RUNS: list[Any] = []


def make_app(url: str) -> Conveyor:
    """The app every process uses: one debounced job."""
    app = Conveyor(url)

    @app.job(name="probe.reindex", debounce=Debounce("doc:1", wait=WAIT))
    def reindex(process: int, call: int) -> None:
        RUNS.append((process, call))

    return app


def caller(url: str, process: int, calls: int) -> None:
    """One process's burst."""
    app = make_app(url)
    fn = app.registry.get("probe.reindex")
    assert fn is not None
    for call in range(calls):
        fn.enqueue(process, call)
    app.close()


def probe(name: str, url: str, calls: int, processes: int) -> None:
    """Burst, then run what is due; print the figures."""
    RUNS.clear()
    ctx = multiprocessing.get_context("fork")
    start = time.perf_counter()
    procs = [ctx.Process(target=caller, args=(url, p, calls // processes))
             for p in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    burst = time.perf_counter() - start
    app = make_app(url)
    stored = app.storage.count_jobs()
    deadline = time.monotonic() + WAIT + 10
    while not RUNS and time.monotonic() < deadline:
        drain(app)
        time.sleep(0.05)
    time.sleep(WAIT)
    drain(app)  # nothing more may run
    print(f"{name:<10} {calls:,} calls from {processes} processes in {burst:.2f} s "
          f"({calls / burst:,.0f}/s): {stored} job stored, {len(RUNS)} run, args {RUNS}",
          flush=True)
    app.close()


def main() -> None:
    """Parse the arguments and probe each store."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    probe("sqlite", f"sqlite:///{tempfile.mkdtemp()}/probe.db", args.calls, args.processes)
    redis_server = RedisServer()
    try:
        probe("redis", redis_server.url, args.calls, args.processes)
    finally:
        redis_server.stop()
    pg = PostgresBench()
    try:
        probe("postgres", f"{pg.url}?schema=probe", args.calls, args.processes)
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
