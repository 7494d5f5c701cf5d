"""Where a conveyor worker's CPU per job goes: py-spy on one worker process draining W0a.

``python -m benchmarks.profile_worker [--jobs 20000] [--body redis] [--gil] [--top 30]``
``python -m benchmarks.profile_worker --enqueue [--cluster] [--jobs 10000]``
``python -m benchmarks.profile_worker --live [--body sqlite]``

Starts its own redis-server, one idle ``conveyor worker -c 8`` (the W0 setup), attaches
``py-spy record --threads -f raw`` to it, enqueues ``--jobs`` jobs of the body in bulk, and
stops py-spy when the last one is counted. The worker's CPU per job comes from its own
``getrusage`` (reported by ``peers/body.py``) over the profiled jobs; each function's share of
py-spy's active samples turns that into microseconds per job, inclusive (the function and
what it calls) and self. py-spy is not a dependency: ``pip install py-spy`` first.

``--live`` enqueues the jobs one by one from this process while the worker runs them (the
W0 workloads' live end to end), so the worker leases and acks them a few at a time.

``--enqueue`` profiles the client instead: one process enqueueing ``--jobs`` no-op jobs one by
one (``job.enqueue``, as W1 does), on a single Redis or (``--cluster``) a local 3-master Redis
Cluster; its CPU per job is its own ``getrusage`` around the loop.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

import redis
from benchmarks.servers import RedisServer
from benchmarks.suite import PEERS_DIR


def cpu_state(r: redis.Redis) -> tuple[float, int]:
    """Summed ``CPU-now`` seconds and completions over the worker processes' last reports."""
    cpu, total = 0.0, 0
    for raw in r.hvals("bench:cpu"):
        _, now, n = raw.split()
        cpu, total = cpu + float(now), total + int(n)
    return cpu, total


def wait_done(r: redis.Redis, n: int, timeout: float) -> None:
    """Poll the completion counter until it reaches ``n``."""
    deadline = time.monotonic() + timeout
    while int(r.get("bench:done") or 0) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{r.get('bench:done')}/{n} jobs after {timeout} s")
        time.sleep(0.01)


def frame_name(frame: str) -> str:
    """``function (path/to/file.py:123)`` -> ``function (file.py)``: one row per function."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for marker in ("/src/", "/site-packages/", "/lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def analyse(raw_file: str, us_per_job: float, top: int, within: str = "") -> str:
    """Inclusive and self µs/job per function, and per thread, from py-spy's raw output
    (only the stacks through a function named ``within``, when given)."""
    incl: Counter[str] = Counter()
    own: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    with open(raw_file) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            frames = stack.split(";")
            thread, frames = frames[0], [frame_name(x) for x in frames[1:]]
            if within and not any(x.startswith(within + " ") for x in frames):
                continue
            total += n
            threads[thread.split(" ")[-1].strip("\"'()") if thread else "?"] += n
            for name in set(frames):
                incl[name] += n
            if frames:
                own[frames[-1]] += n
    if not total:
        return "no samples"
    scale = us_per_job / total
    lines = [f"CPU per job: {us_per_job:.0f} µs; py-spy samples: {total:,}", "",
             "| thread | µs/job |", "|---|---|"]
    lines += [f"| {t} | {n * scale:.0f} |" for t, n in threads.most_common(10)]
    lines += ["", "| function (inclusive) | µs/job | self µs/job |", "|---|---|---|"]
    lines += [f"| `{name}` | {n * scale:.1f} | {own[name] * scale:.1f} |"
              for name, n in incl.most_common(top)]
    lines += ["", "| function (self) | self µs/job |", "|---|---|"]
    lines += [f"| `{name}` | {n * scale:.1f} |" for name, n in own.most_common(top)]
    return "\n".join(lines)


def enqueue_loop(n: int) -> None:
    """The profiled client (a child process): ``n`` no-op jobs one by one; prints its CPU."""
    sys.path.insert(0, PEERS_DIR)
    import conveyor_peer

    enqueue = conveyor_peer.job.enqueue
    for _ in range(200):  # connections, scripts loaded
        enqueue("noop", time.time())
    ru0 = os.times()
    for _ in range(n):
        enqueue("noop", time.time())
    ru1 = os.times()
    cpu = ru1.user + ru1.system - ru0.user - ru0.system
    print(f"CPU_US_PER_JOB {cpu / n * 1e6}", flush=True)
    conveyor_peer.app.close()


def profile_enqueue(args: argparse.Namespace, spy: str) -> None:
    """py-spy over a client enqueueing one by one, on Redis or a Redis Cluster."""
    from benchmarks.servers import RedisCluster

    server = RedisServer()
    cluster = RedisCluster() if args.cluster else None
    tmp = tempfile.mkdtemp(prefix="bench-profile-")
    raw_file = args.out or os.path.join(tmp, "spy.txt")
    env = dict(os.environ, BENCH_DONE_URL=server.url, PYTHONPATH=PEERS_DIR,
               BENCH_CONVEYOR_URL=cluster.url if cluster else server.url)
    try:
        t0 = time.perf_counter()
        out = subprocess.run(
            [spy, "record", "-r", str(args.rate), "-f", "raw", "-o", raw_file, "--",
             sys.executable, "-m", "benchmarks.profile_worker", "--child-enqueue",
             str(args.jobs)], env=env, capture_output=True, text=True, check=True,
            cwd=os.path.dirname(os.path.dirname(PEERS_DIR)))
        wall = time.perf_counter() - t0
        us = float(next(ln.split()[1] for ln in out.stdout.splitlines()
                        if ln.startswith("CPU_US_PER_JOB")))
        where = "a 3-master Redis Cluster" if cluster else "a single Redis"
        print(f"{args.jobs:,} jobs enqueued one by one on {where} ({wall:.1f} s wall with "
              f"start-up, under py-spy)\n")
        print(analyse(raw_file, us, args.top, within="enqueue_loop"))
    finally:
        if cluster:
            cluster.stop()
        server.stop()
        if not args.out:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Profile one worker draining ``--jobs`` jobs and print the tables."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_worker")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--enqueue", action="store_true", help="profile the client enqueueing")
    p.add_argument("--cluster", action="store_true", help="--enqueue on a Redis Cluster")
    p.add_argument("--live", action="store_true",
                   help="enqueue one by one while the worker runs (W0 live), not in bulk first")
    p.add_argument("--child-enqueue", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--body", default="redis", help="redis | aredis | sqlite | noop")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", default="", help="keep py-spy's raw output here")
    p.add_argument("--gil", action="store_true",
                   help="sample only the thread holding the GIL (Python CPU; without it py-spy "
                        "also counts threads that are runnable but waiting for a core)")
    args = p.parse_args(argv)
    if args.child_enqueue:
        enqueue_loop(args.child_enqueue)
        return 0
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if args.enqueue:
        profile_enqueue(args, spy)
        return 0
    server = RedisServer()
    tmp = tempfile.mkdtemp(prefix="bench-profile-")
    env = dict(os.environ, BENCH_DONE_URL=server.url, BENCH_CONVEYOR_URL=server.url,
               BENCH_SQLITE_DIR=tmp, PYTHONPATH=PEERS_DIR)
    os.environ.update(env)
    sys.path.insert(0, PEERS_DIR)
    import conveyor_peer  # the peers dir is not a package; reads BENCH_CONVEYOR_URL

    r = redis.Redis.from_url(server.url)
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "worker", "conveyor_peer:app", "-c", "8",
         "--processes", "1", "-q", "bench", "--log-level", "WARNING", "--url", server.url],
        cwd=PEERS_DIR, env=env)
    spy_proc = None
    try:
        job = conveyor_peer.job_for(args.body)
        job.enqueue_many([(args.body, 0.0)] * 200)  # warm: imports, connections, the loop
        wait_done(r, 200, 120)
        time.sleep(0.5)  # let the last report land
        cpu0, n0 = cpu_state(r)
        raw_file = args.out or os.path.join(tmp, "spy.txt")
        spy_proc = subprocess.Popen(
            [spy, "record", "--pid", str(worker.pid), "--threads", "-r", str(args.rate),
             *(["--gil"] if args.gil else []), "-f", "raw", "-o", raw_file],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(2)  # py-spy attaches
        t0 = time.perf_counter()
        if args.live:  # W0's live end to end: jobs arrive one at a time while it runs
            for _ in range(args.jobs):
                job.enqueue(args.body, 0.0)
        else:
            for start in range(0, args.jobs, 5_000):
                job.enqueue_many([(args.body, 0.0)] * min(5_000, args.jobs - start))
        wait_done(r, 200 + args.jobs, 600)
        wall = time.perf_counter() - t0
        time.sleep(0.2)
        cpu1, n1 = cpu_state(r)
        spy_proc.send_signal(signal.SIGINT)
        spy_proc.wait(60)
        us = (cpu1 - cpu0) / (n1 - n0) * 1e6
        print(f"{args.jobs:,} jobs of body {args.body!r} {'live' if args.live else 'drained'} "
              f"in {wall:.2f} s under py-spy "
              f"({args.jobs / wall:,.0f} jobs/s, slowed by sampling)\n")
        print(analyse(raw_file, us, args.top))
    finally:
        if spy_proc and spy_proc.poll() is None:
            spy_proc.kill()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
        conveyor_peer.app.close()
        server.stop()
        if not args.out:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
