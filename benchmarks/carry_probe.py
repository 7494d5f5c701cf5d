"""Round trips and Redis commands per job of a worker running jobs that wait on I/O: what
carrying acks with the next lease (issue 53, ``Storage.dequeue(acks=)``) saves.

``python -m benchmarks.carry_probe [--jobs 500] [--concurrency 4] [--sleep-ms 2]
[--rounds 1] [--before OTHER/src]``

One private redis-server. Each run, in a fresh interpreter (``--before``: another checkout's
``src`` first on its path, run beside this one): N jobs that sleep ``--sleep-ms`` enqueued,
the server's counters reset, one in-process worker (``Launcher``) of ``--concurrency``
slots runs them all, then ``INFO stats`` and ``INFO commandstats`` are read. Per job:
``total_reads_processed`` (the reads the server served: one per client write, however many
commands it pipelines, so the round trips), the commands, and ``EVALSHA``/``BLPOP`` calls.
The worker's heartbeat and poller are in the counts too (a few per second).

Counts, not times, so they hold on a loaded machine; wall rates printed beside them are
for a quiet one (the coordinator's ``make bench-io``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.server_cpu import run_child

ROOT = str(Path(__file__).resolve().parent.parent)


def child(url: str, jobs: int, concurrency: int, sleep_ms: float) -> dict[str, Any]:
    """One run in this interpreter: the worker of whichever ``conveyor`` is first on the path."""
    import redis
    from conveyor import Conveyor, JobState
    from conveyor.worker.config import WorkerConfig
    from conveyor.worker.launcher import Launcher

    app = Conveyor(url)
    ran = [0]
    all_ran = threading.Event()

    @app.job(name="probe.io")
    def io(ms: float) -> None:
        time.sleep(ms / 1000)
        ran[0] += 1  # under the GIL; only the last one matters
        if ran[0] >= jobs:
            all_ran.set()

    for _ in range(jobs):
        io.enqueue(sleep_ms)
    server = redis.Redis.from_url(url.partition("?")[0])
    server.config_resetstat()
    start = time.perf_counter()
    launcher = Launcher(app, WorkerConfig(concurrency=concurrency, worker_id="carry-probe"))
    launcher.start()
    try:
        # Waited for without asking the server, whose counters are the measure: every job
        # ran, then every ack was written (the acker holds none).
        all_ran.wait(600)
        while len(launcher.acker):
            time.sleep(0.001)
        wall = time.perf_counter() - start
        stats, commands = server.info("stats"), server.info("commandstats")
    finally:
        launcher.stop(10.0)
    succeeded = app.storage.count_jobs(state=JobState.SUCCEEDED)
    app.close()
    if succeeded != jobs:
        raise RuntimeError(f"{succeeded} of {jobs} jobs succeeded")
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in commands.items()}
    return {"jobs": jobs, "wall": wall, "reads": stats["total_reads_processed"],
            "commands": stats["total_commands_processed"], "calls": calls}


def run(url: str, args: argparse.Namespace, src: str | None) -> dict[str, Any]:
    """One run in a fresh interpreter, ``src`` first on its path when given."""
    return run_child("benchmarks.carry_probe", [url, str(args.jobs), str(args.concurrency),
                                                str(args.sleep_ms)], src, "carry_probe run")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--sleep-ms", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--before", default="", help="another checkout's src, run beside this one")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        url, jobs, concurrency, sleep_ms = args.child
        print("RESULT " + json.dumps(child(url, int(jobs), int(concurrency), float(sleep_ms))))
        return
    from benchmarks.servers import RedisServer

    server = RedisServer()
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for n in range(args.rounds):
            for label, src in [("this", None), *([("before", args.before)] if args.before
                                                 else [])]:
                url = f"{server.url}?prefix=carry{n}{label}"
                runs.setdefault(label, []).append(run(url, args, src))
    finally:
        server.stop()
    print(f"{args.jobs} jobs of {args.sleep_ms} ms, one worker of {args.concurrency} slots, "
          f"{args.rounds} round(s), medians")
    print("\n| run | round trips/job | commands/job | EVALSHA/job | BLPOP/job | jobs/s |")
    print("|---|---|---|---|---|---|")
    for label, rows in runs.items():
        def med(key: str, rows: list[dict[str, Any]] = rows) -> float:
            """The median over the rounds of a count per job (``jobs/s`` for the rate)."""
            def one(r: dict[str, Any]) -> float:
                if key == "rate":
                    return float(r["jobs"] / r["wall"])
                value = r["calls"].get(key, 0) if key in ("evalsha", "blpop") else r[key]
                return float(value / r["jobs"])
            return statistics.median(one(r) for r in rows)

        print(f"| {label} | {med('reads'):.2f} | {med('commands'):.2f} "
              f"| {med('evalsha'):.2f} | {med('blpop'):.2f} | {med('rate'):,.0f} |")


if __name__ == "__main__":
    main()
