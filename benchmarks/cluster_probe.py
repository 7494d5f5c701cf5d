"""Redis Cluster against a single Redis, one call at a time (not a test; run it by hand):

    python -m benchmarks.cluster_probe [--jobs 3000] [--rounds 3] [--profile]
    PROBE_QUEUE=probe2 python -m benchmarks.cluster_probe  # a queue on the doorbells' node

Starts a private redis-server and a private local 3-master Cluster, then measures on each:

* **enqueue one by one**: ``fn.enqueue()`` N times, the way an application calls it;
* **live end to end**: a worker (``conveyor worker --processes 1 -c 10``) waits; N jobs are
  enqueued one by one; the time from the first enqueue to the last completion.

Rounds alternate single and Cluster, and the median is reported, so both see the same load
on a shared machine. With ``--profile`` it also prints where one Cluster enqueue spends its
time: each part timed alone (the client's call, the script, the doorbell ring, a bare round
trip on a node's own connection, a round trip through redis-py's cluster client), and the
top of a cProfile of N enqueues.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis
from benchmarks.servers import RedisCluster, RedisServer
from conveyor import Conveyor
from conveyor.core.ids import new_id
from conveyor.core.job import JobSpec, JobState
from conveyor.storage.redis.storage import RedisStorage

QUEUE = os.environ.get("PROBE_QUEUE", "probe")  # "probe2" shares the doorbells' node
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The worker imports this module for its app: the URL comes from the environment.
app = Conveyor(os.environ.get("PROBE_URL", "memory://"))


@app.job(name="probe.noop", queue=QUEUE, retry=0)
def noop() -> None:
    """The job: nothing, so the engine is what is measured."""


def fresh(url: str) -> str:
    """``url`` with a key prefix of its own, so no run sees another's jobs."""
    return f"{url}?prefix=p{uuid.uuid4().hex[:8]}"


def enqueue_rate(url: str, n: int) -> tuple[float, float]:
    """(jobs/s by the wall clock, client CPU µs per enqueue) of ``n`` one-by-one enqueues."""
    probe = Conveyor(fresh(url))
    fn = probe.job(name="probe.noop", queue=QUEUE, retry=0)(lambda: None)
    fn.enqueue()  # first use opens the storage and registers the queue
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        fn.enqueue()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    probe.close()
    return n / wall, cpu / n * 1e6


@contextmanager
def worker(url: str) -> Iterator[None]:
    """One worker process on ``url``, running until the block ends."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PROBE_URL=url, PYTHONPATH=path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "worker", "benchmarks.cluster_probe:app",
         "-c", "10", "--processes", "1", "-q", QUEUE, "--log-level", "WARNING", "--url", url],
        cwd=ROOT, env=env)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(30)


def wait_done(store: RedisStorage, n: int, deadline: float) -> float:
    """Poll until ``n`` jobs of the queue succeeded; the time it was seen."""
    while store.count_jobs(state=JobState.SUCCEEDED, queue=QUEUE) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {n} jobs done in time")
        time.sleep(0.001)
    return time.perf_counter()


def live_rate(url: str, n: int) -> float:
    """Jobs/s from the first one-by-one enqueue to the last completion, one worker waiting."""
    url = fresh(url)
    os.environ["PROBE_URL"] = url
    probe = Conveyor(url)
    fn = probe.job(name="probe.noop", queue=QUEUE, retry=0)(lambda: None)
    store = probe.storage
    assert isinstance(store, RedisStorage)
    with worker(url):
        fn.enqueue()  # warm-up: the worker is up and waiting once this one is done
        wait_done(store, 1, time.monotonic() + 60)
        time.sleep(0.2)  # let it go idle (blocked in its wait), as a live worker is
        t0 = time.perf_counter()
        for _ in range(n):
            fn.enqueue()
        t1 = wait_done(store, n + 1, time.monotonic() + 300)
    probe.close()
    return n / (t1 - t0)


def per_call(fn: Callable[[], object], n: int) -> float:
    """Wall µs per call of ``fn``, over ``n`` calls."""
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def breakdown(url: str, n: int) -> None:
    """Where one Cluster enqueue spends its time: each part alone, then a cProfile."""
    probe = Conveyor(fresh(url))
    fn = probe.job(name="probe.noop", queue=QUEUE, retry=0)(lambda: None)
    store = probe.storage
    assert isinstance(store, RedisStorage)
    qk = store.ctx.register_queue(QUEUE)

    def spec() -> JobSpec:
        return JobSpec(id=new_id(), name="probe.noop", queue=QUEUE, payload="[]")

    def script() -> object:
        s = spec()
        from conveyor.storage.redis import codec
        return store.scripts.run("enqueue", qk, [store.ctx.now_arg(), QUEUE,
                                                  *codec.enqueue_args(s)])

    client = store.link.client
    doorbell_key = store.keys.doorbell(QUEUE)
    doorbell_node = client.get_node_from_key(doorbell_key)  # type: ignore[union-attr]
    queue_node = client.get_node_from_key(qk.pending)  # type: ignore[union-attr]
    direct = redis.Redis(host=queue_node.host, port=queue_node.port)
    print(f"  queue {QUEUE!r} on {queue_node.name}, doorbell on {doorbell_node.name}"
          f" ({'same node' if queue_node.name == doorbell_node.name else 'another node'})")
    parts = [
        ("fn.enqueue() (the whole call)", fn.enqueue),
        ("storage.enqueue([spec])", lambda: store.enqueue([spec()])),
        ("enqueue.lua alone (Scripts.run)", script),
        ("ring alone (Scripts.run ring.lua)", lambda: store.ctx.ring(QUEUE, 1)),
        ("PING via the Link", lambda: store.link.call("PING")),
        ("GET key via the Link", lambda: store.link.call("GET", qk.meta)),
        ("GET key via a plain redis.Redis", lambda: direct.get(qk.meta)),
    ]
    for label, call in parts:
        print(f"  {label:<40} {per_call(call, n):8.1f} µs")
    direct.close()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        fn.enqueue()
    profile.disable()
    print(f"\n  cProfile of {n} fn.enqueue() on Cluster, top 25 by own time:")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(25)
    print("  cumulative, top 30:")
    stats.sort_stats("cumulative").print_stats(30)
    probe.close()


def main() -> None:
    """Start the servers, run the rounds, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only", choices=["enqueue", "live"], default=None)
    opts = parser.parse_args()
    single, cluster = RedisServer(), RedisCluster()
    urls = {"single": single.url, "cluster": cluster.url}
    results: dict[str, list[float]] = {}
    try:
        for _ in range(opts.rounds):
            for name, url in urls.items():
                if opts.only in (None, "enqueue"):
                    rate, cpu = enqueue_rate(url, opts.jobs)
                    results.setdefault(f"{name} enqueue", []).append(rate)
                    results.setdefault(f"{name} enqueue cpu µs", []).append(cpu)
                if opts.only in (None, "live"):
                    results.setdefault(f"{name} live", []).append(live_rate(url, opts.jobs))
        print(f"n = {opts.jobs}, median of {opts.rounds} rounds (all rounds in brackets)")
        for label, values in results.items():
            print(f"  {label:<24} {statistics.median(values):>9,.0f}   "
                  f"({', '.join(f'{v:,.0f}' for v in values)})")
        for what in ("enqueue", "live"):
            if f"single {what}" in results:
                ratio = (statistics.median(results[f"cluster {what}"])
                         / statistics.median(results[f"single {what}"]))
                print(f"  cluster / single {what:<8} {ratio:>6.2f}")
        if opts.profile:
            print("\nOne Cluster enqueue, part by part:")
            breakdown(cluster.url, opts.jobs)
    finally:
        single.stop()
        cluster.stop()


if __name__ == "__main__":
    main()
