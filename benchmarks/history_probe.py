"""What the per-minute history costs an acknowledgement (a benchmark, not a test):

    python -m benchmarks.history_probe --before /path/to/checkout/src [--rounds 5]

The history is counted inside the ack's own statement or script, so its cost is the time an
ack call takes, with it and without it. For SQLite, Redis and PostgreSQL (private servers
started here), each round runs this checkout's conveyor and ``--before``'s (a checkout from
before the history: ``git worktree add /tmp/before bb9e480``) one after the other, in
alternating order, each in a fresh process on a fresh store: enqueue ``--jobs`` jobs, then
lease and acknowledge them 8 at a time (as a worker's acker does, one call per 8), timing
only the ``ack`` calls. Prints the median µs per ack call of each side and the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from benchmarks.servers import PostgresBench, RedisServer

BATCH = 8  # a worker's acker sends the outcomes of its slots together


def child(url: str, jobs: int) -> None:
    """Run in a subprocess on one side's conveyor: print µs per ack call as JSON."""
    from conveyor.core.job import Ack, JobSpec, Outcome
    from conveyor.storage import open_storage

    store = open_storage(url)
    try:
        specs = [JobSpec(id=f"h{n:08d}", name="probe.noop", queue="probe",
                         payload='{"a":[],"k":{}}') for n in range(jobs)]
        for first in range(0, jobs, 500):
            store.enqueue(specs[first:first + 500])
        spent, calls = 0.0, 0
        while leased := store.dequeue(["probe"], "w-probe", BATCH, 60.0):
            acks = [Ack(job_id=j.id, token=j.token, outcome=Outcome.SUCCEEDED) for j in leased]
            start = time.perf_counter()
            store.ack(acks)
            spent += time.perf_counter() - start
            calls += 1
        print(json.dumps({"us_per_call": 1e6 * spent / calls, "calls": calls}))
    finally:
        store.close()


def run_side(src: str, url: str, jobs: int) -> float:
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.getcwd()}
    out = subprocess.run([sys.executable, "-m", "benchmarks.history_probe", "--child", url,
                          "--jobs", str(jobs)], env=env, capture_output=True, text=True,
                         check=True, timeout=600)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["us_per_call"])


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.history_probe")
    p.add_argument("--before", help="src/ of a checkout without the history")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=8000)
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.jobs)
        return 0
    if not args.before:
        p.error("--before is required")
    after = os.path.join(os.getcwd(), "src")
    redis, pg = RedisServer(), PostgresBench()
    tmp = tempfile.mkdtemp(prefix="history-probe-")
    stores = {
        "sqlite": lambda: f"sqlite:///{tmp}/{uuid.uuid4().hex}.db",
        "redis": lambda: f"{redis.url}?prefix=p{uuid.uuid4().hex[:8]}",
        "postgres": lambda: f"{pg.url}?schema=p{uuid.uuid4().hex[:8]}",
    }
    try:
        print(f"{args.jobs} jobs acknowledged {BATCH} per call; median µs per ack call over "
              f"{args.rounds} rounds (each side in a fresh process and store)")
        for name, url in stores.items():
            took: dict[str, list[float]] = {"before": [], "after": []}
            for r in range(args.rounds):
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                for side in order:
                    took[side].append(run_side(args.before if side == "before" else after,
                                               url(), args.jobs))
            b, a = statistics.median(took["before"]), statistics.median(took["after"])
            print(f"{name:9} before {b:7.0f} µs   with history {a:7.0f} µs   "
                  f"{a - b:+6.0f} µs per call ({100 * (a - b) / b:+.1f}%), "
                  f"{(a - b) / BATCH:+.1f} µs per job")
    finally:
        redis.stop()
        pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
