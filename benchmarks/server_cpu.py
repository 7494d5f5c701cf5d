"""Server CPU per job: how many jobs one Redis core (or one PostgreSQL) carries, conveyor
beside a raw queue on the same server in the same run (issue 53; a benchmark, not a test).

    python -m benchmarks.server_cpu [--jobs 5000] [--bulk 20000] [--rounds 3]
        [--backends redis,cluster,postgres] [--cases ...] [--before OTHER/src] [--smoke]

Starts its own servers (``servers.py``). Every case runs in a fresh interpreter against the
same server, the cases alternate round by round (reversed every other round), and the
medians are printed. A case measures, around its loop only (set-up and warm-up left out):

* the server's CPU seconds: ``INFO cpu`` (``used_cpu_user`` + ``used_cpu_sys``) of the
  Redis server, summed over every master of the Cluster; for PostgreSQL the CPU of the
  postmaster's process tree (its backends and background processes, ``/proc``);
* Redis ``INFO commandstats`` (reset first): calls and µs per call of every command, the
  scripts' own time with their inner commands;
* the client's CPU (``time.process_time``; for ``drain`` the worker process's) and wall rate.

Cases: ``raw_push`` (``LPUSH`` one by one; PostgreSQL: ``INSERT``), ``raw_script`` (a
one-line ``EVALSHA``: ``HSET`` + ``LPUSH``), ``enqueue`` / ``aenqueue`` (one by one),
``enqueue_many`` (``--bulk`` jobs in one call), ``raw_pop`` (``BRPOP`` one by one;
PostgreSQL: ``DELETE … SKIP LOCKED … RETURNING``) and ``drain`` (lease + ack of ``--jobs``
preloaded no-op jobs by one ``conveyor worker``, 1 process × 8 slots, as
``worker_cpu.py`` starts it). ``enqueue`` is compared with ``raw_push``, ``drain`` with
``raw_pop``. ``--before SRC`` runs conveyor's cases a second time with another checkout's
``src`` (named ``… (before)``), alternating with this one. ``--smoke``: a few hundred jobs,
one round, Redis only unless ``--backends`` says otherwise; seconds, no thresholds.

CPU per job is the robust figure on a busy machine; rates and wall times are not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RAW_KEY = "{raw}:queue"
RAW_HASH = "{raw}:jobs"
ONE_LINE = ("redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) "
            "return redis.call('LPUSH', KEYS[2], ARGV[1])")
CASES = ("raw_push", "raw_apush", "raw_script", "enqueue", "aenqueue", "enqueue_many", "raw_pop",
         "drain")
CONVEYOR = frozenset({"enqueue", "aenqueue", "enqueue_many", "drain"})
REDIS_ONLY = frozenset({"raw_apush", "raw_script"})  # no PostgreSQL counterpart here
BASELINE = {"enqueue": "raw_push", "aenqueue": "raw_apush", "raw_script": "raw_push",
            "raw_apush": "raw_push", "drain": "raw_pop"}


# -- the server's side -----------------------------------------------------------------------

class Server:
    """CPU seconds and command counts of the server a case runs against."""

    def __init__(self, backend: str, url: str, pid: int) -> None:
        self.backend, self.pid = backend, pid
        self.nodes: list[redis.Redis] = []
        if backend == "redis":
            self.nodes = [redis.Redis.from_url(url)]
        elif backend == "cluster":
            hosts = url.split("://", 1)[1].split(",")
            self.nodes = [redis.Redis(host=h.split(":")[0], port=int(h.split(":")[1]))
                          for h in hosts]

    def cpu(self) -> float:
        """CPU seconds the server has used so far."""
        if self.backend == "postgres":
            from benchmarks.proc_cpu import tree_cpu

            return tree_cpu(self.pid)
        total = 0.0
        for node in self.nodes:
            info = node.info("cpu")
            total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        return total

    def reset(self) -> None:
        """Zero the command counters (Redis)."""
        for node in self.nodes:
            node.config_resetstat()

    def commands(self) -> dict[str, list[float]]:
        """Command name -> [calls, µs], summed over the nodes (Redis)."""
        out: dict[str, list[float]] = {}
        for node in self.nodes:
            for name, s in node.info("commandstats").items():
                name = name.removeprefix("cmdstat_")
                if name in ("info", "config|resetstat", "config"):
                    continue
                got = out.setdefault(name, [0, 0.0])
                got[0] += int(s["calls"])
                got[1] += float(s["usec"])
        return out


class Meter:
    """What a loop of ``n`` jobs cost the server and the client, from ``start`` to ``stop``."""

    def __init__(self, server: Server, n: int,
                 client_cpu: Callable[[], float] = time.process_time) -> None:
        self.server, self.n, self.client_cpu = server, n, client_cpu
        self.s0 = self.c0 = self.w0 = 0.0

    def start(self) -> None:
        """Zero the command counters and read the clocks."""
        self.server.reset()
        self.s0, self.c0, self.w0 = self.server.cpu(), self.client_cpu(), time.perf_counter()

    def stop(self) -> dict[str, Any]:
        """Per job: server and client CPU µs, jobs/s, and the server's command counts."""
        wall = time.perf_counter() - self.w0
        client, cpu = self.client_cpu() - self.c0, self.server.cpu() - self.s0
        return {"n": self.n, "server_us": cpu / self.n * 1e6,
                "client_us": client / self.n * 1e6, "rate": self.n / wall,
                "commands": self.server.commands()}


def measured(server: Server, n: int, loop: Callable[[], Any],
             client_cpu: Callable[[], float] = time.process_time) -> dict[str, Any]:
    """Run ``loop`` (``n`` jobs' worth) and return what it cost the server and the client."""
    meter = Meter(server, n, client_cpu)
    meter.start()
    loop()
    return meter.stop()


# -- the cases (each in its own interpreter) -------------------------------------------------

def _message() -> str:
    return json.dumps(["noop", time.time()])  # what the suite's raw queue pushes


def _raw_client(backend: str, url: str) -> Any:
    if backend == "cluster":
        host, port = url.split("://", 1)[1].split(",")[0].split(":")
        return redis.RedisCluster(host=host, port=int(port))
    return redis.Redis.from_url(url)


def _pg_raw(url: str) -> Any:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE TABLE IF NOT EXISTS raw_queue (id bigserial PRIMARY KEY, body text)")
    conn.execute("TRUNCATE raw_queue")
    return conn


def raw_case(case: str, backend: str, url: str, n: int, server: Server) -> dict[str, Any]:
    """``raw_push``, ``raw_script`` or ``raw_pop`` on the backend."""
    if backend == "postgres":
        conn = _pg_raw(url)
        if case == "raw_pop":
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO raw_queue (body) VALUES (%s)",
                                [(_message(),) for _ in range(n)])
            pop = ("DELETE FROM raw_queue WHERE id = (SELECT id FROM raw_queue ORDER BY id "
                   "FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING body")
            return measured(server, n, lambda: [conn.execute(pop).fetchone()
                                                for _ in range(n)])
        push = "INSERT INTO raw_queue (body) VALUES (%s)"
        return measured(server, n, lambda: [conn.execute(push, (_message(),))
                                            for _ in range(n)])
    r = _raw_client(backend, url)
    r.delete(RAW_KEY)
    r.delete(RAW_HASH)
    if case == "raw_apush":
        return asyncio.run(_raw_apush(backend, url, n, server))
    if case == "raw_pop":
        for start in range(0, n, 1000):
            r.lpush(RAW_KEY, *[_message() for _ in range(min(1000, n - start))])
        return measured(server, n, lambda: [json.loads(r.brpop([RAW_KEY], 1)[1])
                                            for _ in range(n)])
    if case == "raw_script":
        script = r.register_script(ONE_LINE)
        script(keys=[RAW_HASH, RAW_KEY], args=["warm", "up"])
        return measured(server, n, lambda: [script(keys=[RAW_HASH, RAW_KEY],
                                                   args=[str(i), _message()])
                                            for i in range(n)])
    return measured(server, n, lambda: [r.lpush(RAW_KEY, _message()) for _ in range(n)])


async def _raw_apush(backend: str, url: str, n: int, server: Server) -> dict[str, Any]:
    """``LPUSH`` one by one on a redis.asyncio client: what ``aenqueue`` is compared with."""
    import redis.asyncio as aredis

    if backend == "cluster":
        host, port = url.split("://", 1)[1].split(",")[0].split(":")
        r: Any = aredis.RedisCluster(host=host, port=int(port))
    else:
        r = aredis.Redis.from_url(url)
    await r.lpush(RAW_KEY, _message())  # connect
    meter = Meter(server, n)
    meter.start()
    for _ in range(n):
        await r.lpush(RAW_KEY, _message())
    got = meter.stop()
    await r.aclose()
    return got


def conveyor_case(case: str, url: str, n: int, server: Server) -> dict[str, Any]:
    """``enqueue``, ``aenqueue``, ``enqueue_many`` or ``drain`` through conveyor's API."""
    from benchmarks import worker_cpu
    from conveyor import Conveyor

    app = Conveyor(url)
    job = app.job(name="job", queue=worker_cpu.QUEUE, retry=0)(worker_cpu._job)
    job.enqueue_many([("noop",)], return_refs=False)  # open the storage, load the scripts
    if case == "drain":
        return drain(app, job, url, n, server)
    job.enqueue("noop")
    if case == "enqueue_many":
        out = measured(server, n, lambda: job.enqueue_many([("noop",)] * n, return_refs=False))
    elif case == "aenqueue":
        async def each() -> dict[str, Any]:
            await job.aenqueue("noop")  # a first call opens the loop's client
            meter = Meter(server, n)
            meter.start()
            for _ in range(n):
                await job.aenqueue("noop")
            return meter.stop()

        out = asyncio.run(each())
    else:
        out = measured(server, n, lambda: [job.enqueue("noop") for _ in range(n)])
    app.close()
    return out


def drain(app: Any, job: Any, url: str, n: int, server: Server) -> dict[str, Any]:
    """Lease and acknowledge ``n`` preloaded jobs by one worker process (1 × 8)."""
    from benchmarks import worker_cpu
    from conveyor.job import JobState

    storage = app.storage
    storage.pause_queue(worker_cpu.QUEUE)
    for start in range(0, n, 5000):
        job.enqueue_many([("noop",)] * min(5000, n - start), return_refs=False)
    total = n + 1  # the warm-up job
    env = dict(os.environ, WORKER_CPU_URL=url,
               PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), ROOT])))
    proc = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "conveyor"), "worker",
         "benchmarks.worker_cpu:app", "--processes", "1", "-c", "8", "-q", worker_cpu.QUEUE,
         "--log-level", "WARNING"], env=env, cwd=ROOT)
    try:
        worker_cpu.wait_idle(proc.pid)

        def run() -> None:
            storage.resume_queue(worker_cpu.QUEUE)
            worker_cpu.poll(lambda: storage.count_jobs(state=JobState.SUCCEEDED,
                                                       queue=worker_cpu.QUEUE),
                            total, 600, 0.02)

        return measured(server, total, run, lambda: worker_cpu.cpu_seconds(proc.pid))
    finally:
        worker_cpu.stop(proc)
        app.close()


def child(argv: list[str]) -> None:
    """One case in this interpreter: prints ``RESULT {json}``."""
    case, backend, url, n, pid = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    server = Server(backend, url, pid)
    if case in CONVEYOR:
        got = conveyor_case(case, url, n, server)
    else:
        got = raw_case(case, backend, url, n, server)
    print("RESULT " + json.dumps(got), flush=True)


# -- the driver ------------------------------------------------------------------------------

class Backend:
    """A private server for one backend, and the URL each case gets."""

    def __init__(self, name: str) -> None:
        from benchmarks.servers import PostgresBench, RedisCluster, RedisServer

        self.name = name
        self.server: Any = {"redis": RedisServer, "cluster": RedisCluster,
                            "postgres": PostgresBench}[name]()
        self.pid = self.server.server.process.pid if name == "postgres" else 0
        self.count = 0

    def url(self, case: str) -> str:
        """A clean store for the case: Redis flushed, a new PostgreSQL schema."""
        self.count += 1
        if self.name == "postgres":
            return f"{self.server.url}?schema=cpu{self.count}" if case in CONVEYOR else \
                self.server.url
        nodes = Server(self.name, self.server.url, 0).nodes
        for node in nodes:
            node.flushall()
        return str(self.server.url)

    def stop(self) -> None:
        """Stop the server."""
        self.server.stop()


def run_case(backend: Backend, case: str, n: int, src: str | None) -> dict[str, Any]:
    """Run one case in a fresh interpreter (with ``src`` first on its path when given)."""
    path = [p for p in (src, ROOT, os.environ.get("PYTHONPATH")) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.server_cpu", "--child", case, backend.name,
         backend.url(case), str(n), str(backend.pid)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            return result
    raise RuntimeError(f"{case} on {backend.name} failed:\n{out.stderr[-3000:]}")


def report(name: str, runs: dict[str, list[dict[str, Any]]]) -> str:
    """The table of one backend: medians over the rounds."""
    def med(label: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[label])

    lines = [f"\n### {name}\n",
             "| case | jobs | server CPU µs/job | × raw | one core carries /s "
             "| client CPU µs/job | jobs/s | server commands/job |",
             "|---|---|---|---|---|---|---|---|"]
    for label in runs:
        base = BASELINE.get(label.split(" (")[0])
        ratio = f"{med(label, 'server_us') / med(base, 'server_us'):.2f}×" \
            if base in runs else ""
        first = runs[label][0]
        calls = sum(c for c, _ in first["commands"].values()) / first["n"]
        lines.append(f"| {label} | {first['n']:,} | {med(label, 'server_us'):.1f} | {ratio} | "
                     f"{1e6 / med(label, 'server_us'):,.0f} | {med(label, 'client_us'):.1f} | "
                     f"{med(label, 'rate'):,.0f} | {calls:.2f} |")
    lines.append("\nRedis commands (first round): calls per job, µs per call (a script's "
                 "time includes its inner commands)\n")
    for label, rounds in runs.items():
        stats = rounds[0]["commands"]
        if not stats:
            continue
        top = sorted(stats.items(), key=lambda kv: -kv[1][1])[:6]
        parts = [f"{cmd} {calls / rounds[0]['n']:.2f}×{us / max(calls, 1):.1f}"
                 for cmd, (calls, us) in top]
        lines.append(f"- {label}: " + ", ".join(parts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the cases on each backend and print one table per backend."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.server_cpu")
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--bulk", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default="")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--before", default="", help="another checkout's src, run beside this one")
    p.add_argument("--smoke", action="store_true", help="a few hundred jobs, one round")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    if args.smoke:
        args.jobs, args.bulk, args.rounds = 300, 500, 1
    backends = (args.backends or ("redis" if args.smoke else "redis,cluster,postgres")).split(",")
    cases = [c for c in args.cases.split(",") if c]
    unknown = set(cases) - set(CASES) | set(backends) - {"redis", "cluster", "postgres"}
    if unknown:
        p.error(f"unknown case or backend: {', '.join(sorted(unknown))}")
    plan = [(c, None) for c in cases]
    if args.before:
        plan += [(c, args.before) for c in cases if c in CONVEYOR]
    print(f"server CPU per job: {args.jobs:,} jobs one by one, enqueue_many of {args.bulk:,}, "
          f"{args.rounds} round(s), medians", flush=True)
    for name in backends:
        plan_here = [(c, s) for c, s in plan if name != "postgres" or c not in REDIS_ONLY]
        backend = Backend(name)
        runs: dict[str, list[dict[str, Any]]] = {}
        try:
            for rnd in range(args.rounds):
                order = plan_here if rnd % 2 == 0 else plan_here[::-1]
                for case, src in order:
                    n = args.bulk if case == "enqueue_many" else args.jobs
                    got = run_case(backend, case, n, src)
                    label = case + (" (before)" if src else "")
                    runs.setdefault(label, []).append(got)
                    print(f"  {name} round {rnd + 1} {label:<22} server {got['server_us']:7.1f} "
                          f"µs/job  client {got['client_us']:7.1f} µs/job  "
                          f"{got['rate']:9,.0f} jobs/s", file=sys.stderr, flush=True)
        finally:
            backend.stop()
        ordered = {label: runs[label] for label in sorted(
            runs, key=lambda k: (CASES.index(k.split(" (")[0]), k))}
        print(report(name, ordered), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
