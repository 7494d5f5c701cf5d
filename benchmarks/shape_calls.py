"""What the storage's Python costs per hot-path call, old checkout beside new (not a test):

    python -m benchmarks.shape_calls --old /path/to/old/src [--stores memory,sqlite,redis,postgres]

Built for issue 52's reshape of the backends (composition instead of inheritance), which must
not add Python work to the hot path. For each store it runs the same calls in both checkouts,
alternating old and new in fresh processes (``--rounds``), against one private server per
store started here (``benchmarks/servers.py``), and prints per call:

* Python function calls (cProfile's count, which does not depend on the machine's load): the
  delegation a shape adds shows here as whole calls per operation;
* CPU time of this process per call, without the profiler (median over the rounds), which a
  loaded machine blurs: run it quiet for numbers to quote.

The calls: ``enqueue`` of one job, ``enqueue`` of 100, ``dequeue`` of one, ``ack`` of one,
``dequeue`` + ``ack`` of 100, ``heartbeat`` with 10 leases.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

REPEAT = 200  # calls of each kind per measurement


def _ops(store: Any, queue: str) -> dict[str, Callable[[], object]]:
    """The measured calls, each ready to run ``REPEAT`` times against ``store``."""
    from conveyor.core.ids import new_id
    from conveyor.core.job import Ack, JobSpec, Outcome
    try:
        from conveyor.storage.workers import WorkerInfo
    except ImportError:  # a checkout from before issue 52 split storage/records.py
        from conveyor.storage.records import WorkerInfo  # type: ignore[import-not-found,no-redef]

    def spec() -> JobSpec:
        return JobSpec(id=new_id(), name="bench.noop", queue=queue, payload='{"a":[1]}')

    info = WorkerInfo(id="probe", hostname="h", pid=1, queues=(queue,), concurrency=1,
                      started_at=0.0, last_seen=0.0)
    held: list[Any] = []

    def enqueue_one() -> object:
        return store.enqueue([spec()])

    def enqueue_100() -> object:
        return store.enqueue([spec() for _ in range(100)])

    def dequeue_one() -> object:
        held.extend(store.dequeue([queue], "probe", 1, 60.0))
        return held

    def ack_one() -> object:
        job = held.pop()
        return store.ack([Ack(job.id, job.token, Outcome.SUCCEEDED)])

    def drain_100() -> object:
        jobs = store.dequeue([queue], "probe", 100, 60.0)
        return store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs])

    def heartbeat() -> object:
        # tokens that name their queue, as real ones do: no search for the job on Redis
        return store.heartbeat(info, {f"j{i}": f"t/{queue}" for i in range(10)}, 60.0)

    return {"enqueue 1": enqueue_one, "enqueue 100": enqueue_100, "dequeue 1": dequeue_one,
            "ack 1": ack_one, "dequeue+ack 100": drain_100, "heartbeat": heartbeat}


def measure(url: str) -> dict[str, dict[str, float]]:
    """Run every call ``REPEAT`` times twice (profiled for the count, then timed)."""
    from conveyor.storage import open_storage

    store = open_storage(url)
    out: dict[str, dict[str, float]] = {}
    try:
        for attempt in ("counted", "timed"):
            queue = f"probe-{attempt}-{os.getpid()}"
            # jobs for the drains: 100 per call, made before either pass so each drains 100
            ops = _ops(store, queue)
            for name, op in ops.items():
                if name == "dequeue+ack 100":
                    for _ in range(REPEAT):
                        ops["enqueue 100"]()
                if attempt == "counted":
                    prof = cProfile.Profile()
                    prof.enable()
                    for _ in range(REPEAT):
                        op()
                    prof.disable()
                    stats = pstats.Stats(prof)
                    out.setdefault(name, {})["calls"] = stats.total_calls / REPEAT  # type: ignore[attr-defined]
                else:
                    started = time.process_time()
                    for _ in range(REPEAT):
                        op()
                    out[name]["cpu_us"] = (time.process_time() - started) / REPEAT * 1e6
    finally:
        store.close()
    return out


def _servers(stores: list[str]) -> tuple[dict[str, str], list[Callable[[], None]]]:
    urls: dict[str, str] = {}
    stops: list[Callable[[], None]] = []
    tmp = tempfile.mkdtemp(prefix="shape-calls-")
    for store in stores:
        if store == "memory":
            urls[store] = "memory://probe"
        elif store == "sqlite":
            urls[store] = f"sqlite:///{tmp}/probe.db"
        elif store == "redis":
            from benchmarks.servers import RedisServer
            redis_server = RedisServer()
            urls[store] = redis_server.url
            stops.append(redis_server.stop)
        elif store == "postgres":
            from tests.support.postgres_server import PostgresServer
            pg = PostgresServer().start()
            urls[store] = pg.url + "?schema=probe"
            stops.append(pg.cleanup)
    return urls, stops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="src folder of the checkout to compare with")
    parser.add_argument("--stores", default="memory,sqlite,redis,postgres")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child: measure this URL, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    stores = args.stores.split(",")
    new_src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    sides = {"new": new_src} if not args.old else {"old": args.old, "new": new_src}
    urls, stops = _servers(stores)
    try:
        for store in stores:
            results: dict[str, list[dict[str, dict[str, float]]]] = {side: [] for side in sides}
            for _ in range(args.rounds):
                for side, src in sides.items():  # alternated: the machine's drift hits both
                    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.getcwd()])}
                    done = subprocess.run(
                        [sys.executable, "-m", "benchmarks.shape_calls", "--one", urls[store]],
                        env=env, capture_output=True, text=True, check=True)
                    results[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
            _report(store, results)
    finally:
        for stop in stops:
            stop()


def _report(store: str, results: dict[str, list[dict[str, dict[str, float]]]]) -> None:
    print(f"\n{store}")
    sides = list(results)
    head = "".join(f"{side + ' calls':>12}{side + ' cpu µs':>13}" for side in sides)
    print(f"  {'call':<18}{head}")
    for name in results[sides[0]][0]:
        cells = ""
        for side in sides:
            runs = results[side]
            calls = statistics.median(r[name]["calls"] for r in runs)
            cpu = statistics.median(r[name]["cpu_us"] for r in runs)
            cells += f"{calls:>12.1f}{cpu:>13.1f}"
        print(f"  {name:<18}{cells}")


if __name__ == "__main__":
    main()
