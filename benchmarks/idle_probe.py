"""Idle latency: the time from an enqueue to the job starting on an idle worker (issue 53,
target 3), conveyor on Redis and SQLite beside a raw redis-py ``BRPOP`` queue.

``python -m benchmarks.idle_probe [--jobs 200] [--interval-ms 10] [--concurrency 8]
[--rounds 1] [--cases redis,raw,sqlite] [--before OTHER/src]``

Each case runs in a fresh interpreter (``--before``: another checkout's ``src`` first on its
path, run beside this one): one in-process worker (``Launcher``, ``--concurrency`` slots;
for ``raw`` one thread looping on ``BRPOP``) waits idle while a separate enqueuing process
sends one job every ``--interval-ms``, stamped with ``time.time()``; the job records
``time.time() - stamp`` as it starts (the first ``WARM_UP`` of a run are dropped). The
enqueuer is another process, as in the suite's ``w2_latency``: on SQLite a commit from this
process would wake the worker through an in-process condition, which no real deployment has.

Times on a loaded machine are noise; the coordinator's quiet run is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.server_cpu import run_child

ROOT = str(Path(__file__).resolve().parent.parent)
RAW_KEY = "idle-probe:raw"
WARM_UP = 5  # the first jobs of a run pay for connections, script loads and imports: dropped


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def enqueuer(case: str, url: str, jobs: int, interval: float) -> None:
    """The enqueuing process: ``jobs`` stamped jobs, one every ``interval`` seconds."""
    if case == "raw":
        import redis

        server = redis.Redis.from_url(url)
        for _ in range(jobs):
            server.lpush(RAW_KEY, repr(time.time()))
            time.sleep(interval)
        return
    from conveyor import Conveyor

    app = Conveyor(url)

    @app.job(name="probe.idle")
    def idle(stamp: float) -> None:
        """The worker's job (registered here to enqueue it as the suite's peers do)."""

    for _ in range(jobs):
        idle.enqueue(time.time())
        time.sleep(interval)
    app.close()


def child(case: str, url: str, jobs: int, interval: float, concurrency: int) -> dict[str, Any]:
    """One case in this interpreter: the worker of whichever ``conveyor`` is first on the path,
    fed by an enqueuing process; returns the latencies in ms."""
    lat: list[float] = []
    all_ran = threading.Event()
    feed = [sys.executable, "-m", "benchmarks.idle_probe", "--feed", case, url, str(jobs),
            str(interval)]
    if case == "raw":
        import redis

        server = redis.Redis.from_url(url)
        server.delete(RAW_KEY)

        def pop() -> None:
            while len(lat) < jobs:
                item = server.brpop([RAW_KEY], 1)
                if item is not None:
                    lat.append((time.time() - float(item[1])) * 1000)
            all_ran.set()

        threading.Thread(target=pop, daemon=True).start()
        time.sleep(0.2)
        subprocess.run(feed, check=True, env=os.environ, cwd=ROOT)
        all_ran.wait(120)
        return {"lat": lat}
    from conveyor import Conveyor
    from conveyor.worker.config import WorkerConfig
    from conveyor.worker.launcher import Launcher

    app = Conveyor(url)

    @app.job(name="probe.idle")
    def idle(stamp: float) -> None:
        lat.append((time.time() - stamp) * 1000)
        if len(lat) >= jobs:
            all_ran.set()

    launcher = Launcher(app, WorkerConfig(concurrency=concurrency, worker_id="idle-probe"))
    launcher.start()
    try:
        time.sleep(0.3)  # the worker is idle in its wait before the first enqueue
        subprocess.run(feed, check=True, env=os.environ, cwd=ROOT)
        all_ran.wait(120)
    finally:
        launcher.stop(10.0)
        app.close()
    return {"lat": lat}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--interval-ms", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--cases", default="redis,raw,sqlite")
    p.add_argument("--before", default="", help="another checkout's src, run beside this one")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    p.add_argument("--feed", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.feed:
        case, url, jobs, interval = args.feed
        enqueuer(case, url, int(jobs), float(interval))
        return
    if args.child:
        case, url, jobs, interval, conc = args.child
        print("RESULT " + json.dumps(child(case, url, int(jobs), float(interval), int(conc))))
        return
    from benchmarks.servers import RedisServer

    server = RedisServer()
    runs: dict[str, list[float]] = {}
    cases = args.cases.split(",")
    try:
        with tempfile.TemporaryDirectory(prefix="idle-probe-") as tmp:
            for n in range(args.rounds):
                for case in cases:
                    srcs = [("", None)]
                    if args.before and case != "raw":
                        srcs.append((" (before)", args.before))
                    for tag, src in srcs:
                        if case == "sqlite":
                            url = f"sqlite:///{tmp}/r{n}{tag.strip(' ()')}.db"
                        elif case == "redis":
                            url = f"{server.url}?prefix=idle{n}{tag.strip(' ()')}"
                        else:
                            url = str(server.url)
                        res = run_child("benchmarks.idle_probe",
                                        [case, url, str(args.jobs),
                                         str(args.interval_ms / 1000), str(args.concurrency)],
                                        src, f"idle_probe {case}")
                        runs.setdefault(case + tag, []).extend(res["lat"][WARM_UP:])
    finally:
        server.stop()
    print(f"{args.jobs} jobs one every {args.interval_ms} ms, one worker of "
          f"{args.concurrency} slots, {args.rounds} round(s), all samples pooled")
    print("\n| case | samples | p50 ms | p99 ms | mean ms |")
    print("|---|---|---|---|---|")
    for label, lat in runs.items():
        print(f"| {label} | {len(lat)} | {pct(lat, 50):.2f} | {pct(lat, 99):.2f} "
              f"| {statistics.fmean(lat):.2f} |")


if __name__ == "__main__":
    main()
