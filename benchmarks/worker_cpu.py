"""Engine CPU per job: one worker process's CPU time per job, conveyor against a raw queue.

``python -m benchmarks.worker_cpu [--jobs 20000] [--rounds 3] [--bodies noop,incr]
[--stores redis,sqlite] [-c 8] [--profile DIR]``

Starts its own redis-server (and a SQLite file in a temp directory). For each store and body:
preloads ``--jobs`` jobs into a paused queue, starts ``conveyor worker --processes 1 -c 8``
(one process, no supervisor), waits until it is idle, then resumes the queue and waits until
every job has succeeded. The worker's CPU time over that window (user + system, the counters
``getrusage`` reports, read from ``/proc/<pid>/stat`` so that start-up and shutdown are left
out) divided by the jobs is its CPU per job; jobs over the window's wall time is its rate.

The raw queue is the same measure for a minimal worker: 8 threads, each ``BRPOP`` one JSON
message, decode it, run the same body (no lease, no events, no acknowledgement). Its jobs are
pushed to a staging list first and ``RENAME``d into place, which wakes the blocked pops.
*Engine CPU per job* is conveyor's CPU per job minus the raw queue's with the same body: what
conveyor's own Python costs per job (fetch, decode, context, events, ack, hand-offs).

Bodies: ``noop`` returns at once; ``incr`` does one Redis ``INCR`` round trip (redis-py).
Rounds alternate the engines and the medians are printed. ``--profile DIR`` runs each
conveyor worker under ``py-spy record -f raw`` (``pip install py-spy``) and writes one file per
store and body; ``python -m benchmarks.worker_cpu --analyse FILE`` prints its top functions.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any, NamedTuple

import redis
from conveyor import Conveyor
from conveyor.core.job import JobState

QUEUE = "bench"
RAW_KEY = "wcpu:raw"
RAW_STAGE = "wcpu:stage"
RAW_DONE = "wcpu:done"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")

# The app the measured worker runs (``conveyor worker benchmarks.worker_cpu:app``).
app = Conveyor(os.environ.get("WORKER_CPU_URL", "memory://"))
_local = threading.local()


def _redis() -> Any:
    """The body's redis-py client, one per thread (as a job would keep its own)."""
    r = getattr(_local, "r", None)
    if r is None:
        r = _local.r = redis.Redis.from_url(os.environ["WORKER_CPU_REDIS"])
    return r


def body(kind: str) -> None:
    """The shared job body: nothing, or one Redis round trip."""
    if kind == "incr":
        _redis().incr("wcpu:incr")


def _job(kind: str) -> None:
    """conveyor's job: the shared body."""
    body(kind)


job = app.job(name="job", queue=QUEUE, retry=0)(_job)


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a live process (``/proc/<pid>/stat``, as getrusage)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    return sum(cpu_times(pid))


def wait_idle(pid: int, timeout: float = 30.0) -> None:
    """Wait until the process has used no CPU for 0.3 s (its start-up is over)."""
    deadline = time.monotonic() + timeout
    last = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = cpu_seconds(pid)
        if now - last < 1.5 / TICK:
            return
        last = now
    raise TimeoutError("worker never went idle")


def poll(done: Any, n: int, timeout: float, every: float) -> None:
    """Call ``done()`` every ``every`` seconds until it reaches ``n``."""
    deadline = time.monotonic() + timeout
    while done() < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{done()}/{n} jobs done after {timeout:.0f} s")
        time.sleep(every)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM a worker (SIGKILL if it lingers) and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# The queue's own commands (a worker's round trips to Redis; the body's INCR is not one).
QUEUE_COMMANDS = ("evalsha", "eval", "blpop", "brpop")


def queue_calls(r: Any) -> int:
    """Redis commands a queue worker sends, counted by the server (``INFO commandstats``)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in QUEUE_COMMANDS)


def measure(proc: subprocess.Popen[bytes], start: Any, done: Any, n: int,
            every: float, r: Any) -> Run:
    """CPU per job and jobs/s of ``proc`` from ``start()`` until ``done()`` reaches n."""
    try:
        wait_idle(proc.pid)
        calls0 = queue_calls(r)
        (user0, sys0), t0 = cpu_times(proc.pid), time.perf_counter()
        start()
        poll(done, n, 600, every)
        (user1, sys1), t1 = cpu_times(proc.pid), time.perf_counter()
        calls1 = queue_calls(r)
    finally:
        stop(proc)
    return Run((user1 - user0 + sys1 - sys0) / n * 1e6, (sys1 - sys0) / n * 1e6, n / (t1 - t0),
               (calls1 - calls0) / n)


class Run(NamedTuple):
    """One drain: worker CPU µs per job (all, and the system part of it) and jobs/s."""

    us: float
    sys_us: float
    rate: float
    calls: float  # Redis round trips of the queue per job (EVALSHA, BLPOP, BRPOP)


def run_conveyor(store: str, url: str, redis_url: str, kind: str, n: int, conc: int,
                 spy: str | None) -> Run:
    """One conveyor drain of ``n`` preloaded jobs on ``url``."""
    os.environ["WORKER_CPU_URL"] = url
    bench = Conveyor(url)
    storage = bench.storage
    storage.pause_queue(QUEUE)
    fn = bench.job(name="job", queue=QUEUE, retry=0)(_job)
    for start in range(0, n, 5000):
        fn.enqueue_many([(kind,)] * min(5000, n - start))
    env = dict(os.environ, WORKER_CPU_URL=url, WORKER_CPU_REDIS=redis_url,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [os.path.join(os.path.dirname(sys.executable), "conveyor"), "worker",
           "benchmarks.worker_cpu:app", "--processes", "1", "-c", str(conc), "-q", QUEUE,
           "--log-level", "WARNING"]
    if spy:
        # --gil: only the thread holding the GIL is sampled, i.e. the process's Python work
        cmd = [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--gil",
               "-r", "1000", "-f", "raw", "-o", spy, "--", *cmd]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    try:
        pid = proc.pid if not spy else _child_of(proc.pid)
        watched = _Pid(proc, pid)
        return measure(
            watched,  # type: ignore[arg-type]
            lambda: storage.resume_queue(QUEUE),
            lambda: storage.count_jobs(state=JobState.SUCCEEDED, queue=QUEUE),
            n, 0.02, redis.Redis.from_url(redis_url))
    finally:
        stop(proc)
        bench.close()


class _Pid:
    """A Popen whose measured pid may be its child's (the worker under py-spy)."""

    def __init__(self, proc: subprocess.Popen[bytes], pid: int) -> None:
        self._proc, self.pid = proc, pid

    def poll(self) -> int | None:
        return self._proc.poll()

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def kill(self) -> None:
        self._proc.kill()


def _child_of(pid: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = f.read().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        time.sleep(0.05)
    raise TimeoutError("py-spy did not start the worker")


def run_raw(redis_url: str, kind: str, n: int, conc: int) -> Run:
    """One drain of the raw queue's worker."""
    r = redis.Redis.from_url(redis_url)
    r.delete(RAW_KEY, RAW_STAGE, RAW_DONE)
    msg = json.dumps([kind])
    pipe = r.pipeline(transaction=False)
    for start in range(0, n, 1000):
        pipe.lpush(RAW_STAGE, *([msg] * min(1000, n - start)))
    pipe.execute()
    env = dict(os.environ, WORKER_CPU_REDIS=redis_url,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.worker_cpu", "--raw-worker",
                             redis_url, str(n), str(conc)], env=env, cwd=ROOT)
    try:
        return measure(proc, lambda: r.rename(RAW_STAGE, RAW_KEY),
                       lambda: n if r.get(RAW_DONE) else 0, n, 0.005, r)
    finally:
        r.close()


def raw_worker(url: str, n: int, conc: int) -> None:
    """The raw queue's worker process: ``conc`` threads, each BRPOP → json → body."""
    counter = itertools.count(1)  # next() is atomic under the GIL

    def work() -> None:
        r = redis.Redis.from_url(url)
        while True:
            got = r.brpop([RAW_KEY], 1)
            if got is None:
                continue
            (kind,) = json.loads(got[1])
            body(kind)
            if next(counter) == n:
                r.set(RAW_DONE, 1)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(conc)]
    for t in threads:
        t.start()
    signal.sigwait({signal.SIGTERM})


def analyse(path: str, top: int = 40) -> str:
    """Self and inclusive shares of py-spy's samples (GIL held) in the worker's threads."""
    incl: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or "Thread.run" not in stack:  # start-up (imports) left out
                continue
            k = int(count)
            frames = [x.split(" (")[0] + " (" + x.rsplit("/", 1)[-1].split(":")[0]
                      for x in stack.split(";")[1:]]
            total += k
            for name in set(frames):
                incl[name] += k
            if frames:
                own[frames[-1]] += k
    out = [f"{total} samples", "", "self %  function"]
    out += [f"{100 * c / total:5.1f}  {name})" for name, c in own.most_common(top)]
    out += ["", "incl %  function"]
    out += [f"{100 * c / total:5.1f}  {name})" for name, c in incl.most_common(top)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.worker_cpu")
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bodies", default="noop,incr")
    p.add_argument("--stores", default="redis,sqlite")
    p.add_argument("-c", "--concurrency", type=int, default=8)
    p.add_argument("--no-raw", action="store_true", help="skip the raw queue")
    p.add_argument("--profile", default="", help="directory for py-spy raw profiles")
    p.add_argument("--analyse", default="", help="print the top functions of a py-spy file")
    p.add_argument("--raw-worker", nargs=3, metavar=("URL", "N", "C"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.raw_worker:
        raw_worker(args.raw_worker[0], int(args.raw_worker[1]), int(args.raw_worker[2]))
        return 0
    if args.analyse:
        print(analyse(args.analyse))
        return 0
    from benchmarks.servers import RedisServer

    server = RedisServer()
    tmp = tempfile.mkdtemp(prefix="worker-cpu-")
    bodies = args.bodies.split(",")
    stores = args.stores.split(",")
    engines = [*stores, *([] if args.no_raw else ["raw"])]
    results: dict[tuple[str, str], list[Run]] = {}
    try:
        for rnd in range(args.rounds):
            for kind in bodies:
                for engine in engines:
                    redis.Redis.from_url(server.url).flushall()
                    if engine == "raw":
                        got = run_raw(server.url, kind, args.jobs, args.concurrency)
                    else:
                        url = server.url if engine == "redis" else \
                            f"sqlite:///{tmp}/round{rnd}-{kind}.db"
                        spy = (os.path.join(args.profile, f"{engine}-{kind}.txt")
                               if args.profile and rnd == 0 else None)
                        got = run_conveyor(engine, url, server.url, kind, args.jobs,
                                           args.concurrency, spy)
                    results.setdefault((engine, kind), []).append(got)
                    print(f"round {rnd + 1} {engine:6} {kind:5} {got.us:7.1f} µs/job "
                          f"(sys {got.sys_us:5.1f}) {got.rate:8.0f} jobs/s "
                          f"{got.calls:.3f} calls/job", file=sys.stderr, flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.jobs:,} jobs, -c {args.concurrency}, {args.rounds} rounds (medians)\n")
    print("| worker | body | CPU µs/job | of it system | engine CPU µs/job | jobs/s "
          "| Redis calls/job |")
    print("|---|---|---|---|---|---|---|")
    for kind in bodies:
        raw = results.get(("raw", kind))
        raw_us = statistics.median(x.us for x in raw) if raw else None
        for engine in engines:
            runs = results[(engine, kind)]
            us = statistics.median(x.us for x in runs)
            sys_us = statistics.median(x.sys_us for x in runs)
            rate = statistics.median(x.rate for x in runs)
            calls = statistics.median(x.calls for x in runs)
            label = "raw BRPOP" if engine == "raw" else f"conveyor ({engine})"
            eng = "" if engine == "raw" or raw_us is None else f"{us - raw_us:.0f}"
            per = "" if engine == "sqlite" else f"{calls:.2f}"
            print(f"| {label} | {kind} | {us:.0f} | {sys_us:.0f} | {eng} | {rate:,.0f} | {per} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
