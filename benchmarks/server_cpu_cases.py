"""The cases of ``server_cpu.py``, each run in a fresh interpreter (``--child``): what they
measure on the server and the client, and the variants they alternate.

One-by-one cases alternate their variants in blocks of ``BLOCK`` calls in one process
(raw ``LPUSH``, a one-line ``EVALSHA``, conveyor's ``enqueue``; raw async ``LPUSH`` and
``aenqueue``), so that load from elsewhere on the machine falls on each alike, and each
variant's server CPU is also given as a ratio to the raw push measured beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RAW_KEY = "{raw}:queue"
RAW_HASH = "{raw}:jobs"
ONE_LINE = ("redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) "
            "return redis.call('LPUSH', KEYS[2], ARGV[1])")
BLOCK = 250  # calls per variant before the next one takes over


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
        """CPU seconds the server has used so far (every master's; PostgreSQL's tree)."""
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
                if name not in ("info", "config|resetstat", "config"):
                    got = out.setdefault(name, [0, 0.0])
                    got[0] += int(s["calls"])
                    got[1] += float(s["usec"])
        return out


class Tally:
    """What the blocks of one variant cost, summed: server and client CPU, wall, commands."""

    def __init__(self, server: Server, client_cpu: Callable[[], float] = time.process_time,
                 ) -> None:
        self.server, self.client_cpu = server, client_cpu
        self.n, self.server_s, self.client_s, self.wall = 0, 0.0, 0.0, 0.0
        self.stats: dict[str, list[float]] = {}
        self._start = (0.0, 0.0, 0.0)

    def start(self) -> None:
        """Zero the command counters and read the clocks."""
        self.server.reset()
        self._start = (self.server.cpu(), self.client_cpu(), time.perf_counter())

    def stop(self, n: int) -> None:
        """Add the ``n`` jobs since ``start``."""
        wall = time.perf_counter()
        s0, c0, w0 = self._start
        self.n += n
        self.server_s += self.server.cpu() - s0
        self.client_s += self.client_cpu() - c0
        self.wall += wall - w0
        for name, (calls, us) in self.server.commands().items():
            got = self.stats.setdefault(name, [0, 0.0])
            got[0] += calls
            got[1] += us

    def result(self) -> dict[str, Any]:
        """Per job: server and client CPU µs, jobs/s, command calls and µs."""
        return {"n": self.n, "server_us": self.server_s / self.n * 1e6,
                "client_us": self.client_s / self.n * 1e6, "rate": self.n / self.wall,
                "commands": self.stats}


def once(server: Server, n: int, loop: Callable[[], Any],
         client_cpu: Callable[[], float] = time.process_time) -> dict[str, Any]:
    """Run ``loop`` (``n`` jobs' worth) once and return its tally."""
    tally = Tally(server, client_cpu)
    tally.start()
    loop()
    tally.stop(n)
    return tally.result()


def with_ratios(out: dict[str, dict[str, Any]], raw: str) -> dict[str, dict[str, Any]]:
    """Each variant's server CPU per job over the raw one's, measured beside it."""
    base = out[raw]["server_us"] if raw in out else 0.0
    for got in out.values():  # None: no raw variant here, or a server CPU below the tick
        got["ratio"] = got["server_us"] / base if base > 0 else None
    return out


def turns(names: list[str], n: int) -> Iterator[tuple[str, int]]:
    """(variant, calls) for ``n`` calls of each variant in blocks, the first rotating."""
    for i, start in enumerate(range(0, n, BLOCK)):
        for name in names[i % len(names):] + names[:i % len(names)]:
            yield name, min(BLOCK, n - start)


def alternate(server: Server, n: int, variants: dict[str, Callable[[], Any]]
              ) -> dict[str, dict[str, Any]]:
    """``n`` calls of each variant, in blocks taking turns."""
    tallies = {name: Tally(server) for name in variants}
    for name, size in turns(list(variants), n):
        tallies[name].start()
        for _ in range(size):
            variants[name]()
        tallies[name].stop(size)
    return with_ratios({name: t.result() for name, t in tallies.items()}, "raw_push")


async def aalternate(server: Server, n: int,
                     variants: dict[str, Callable[[], Awaitable[Any]]]
                     ) -> dict[str, dict[str, Any]]:
    """``alternate`` for coroutines, on the running loop."""
    tallies = {name: Tally(server) for name in variants}
    for name, size in turns(list(variants), n):
        tallies[name].start()
        for _ in range(size):
            await variants[name]()
        tallies[name].stop(size)
    return with_ratios({name: t.result() for name, t in tallies.items()}, "raw_apush")


def _message() -> str:
    return json.dumps(["noop", time.time()])  # what the suite's raw queue pushes


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].split(",")[0].split(":")
    return host, int(port)


def _pg(url: str) -> Any:
    import psycopg

    conn = psycopg.connect(url.split("?", 1)[0], autocommit=True)  # no ?schema= for psycopg
    conn.execute("CREATE TABLE IF NOT EXISTS raw_queue (id bigserial PRIMARY KEY, body text)")
    conn.execute("TRUNCATE raw_queue")
    return conn


def _raw_push(backend: str, url: str) -> dict[str, Callable[[], Any]]:
    """The raw one-by-one pushes of the backend, by name."""
    if backend == "postgres":
        conn = _pg(url)
        sql = "INSERT INTO raw_queue (body) VALUES (%s)"
        return {"raw_push": lambda: conn.execute(sql, (_message(),))}
    r = redis.RedisCluster(*_host_port(url)) if backend == "cluster" else \
        redis.Redis.from_url(url)
    script = r.register_script(ONE_LINE)
    ids = iter(range(10**9))
    return {"raw_push": lambda: r.lpush(RAW_KEY, _message()),
            "raw_script": lambda: script(keys=[RAW_HASH, RAW_KEY],
                                         args=[next(ids), _message()])}


def _app(url: str) -> tuple[Any, Any]:
    """conveyor's app on ``url`` and the no-op job of ``worker_cpu.py``, storage opened."""
    from benchmarks import worker_cpu
    from conveyor import Conveyor

    app = Conveyor(url)
    job = app.job(name="job", queue=worker_cpu.QUEUE, retry=0)(worker_cpu._job)
    job.enqueue_many([("noop",)], return_refs=False)  # open the storage, load the scripts
    job.enqueue("noop")
    return app, job


def push(backend: str, url: str, n: int, server: Server, raw: bool) -> dict[str, Any]:
    """One-by-one enqueue beside the raw pushes (``raw``: with them), alternated."""
    app, job = _app(url)
    variants = _raw_push(backend, url) if raw else {}
    variants["raw_push"] = variants.get("raw_push") or _raw_push(backend, url)["raw_push"]
    variants["enqueue"] = lambda: job.enqueue("noop")
    for call in variants.values():
        call()  # connected, script loaded
    out = alternate(server, n, variants)
    app.close()
    return out if raw else {"enqueue": out["enqueue"]}


def apush(backend: str, url: str, n: int, server: Server, raw: bool) -> dict[str, Any]:
    """``aenqueue`` one by one beside a redis.asyncio ``LPUSH`` (Redis), alternated."""
    import redis.asyncio as aredis

    app, job = _app(url)

    async def run() -> dict[str, Any]:
        variants: dict[str, Callable[[], Awaitable[Any]]] = {}
        client: Any = None
        if backend != "postgres":
            client = aredis.RedisCluster(*_host_port(url)) if backend == "cluster" else \
                aredis.Redis.from_url(url)
            variants["raw_apush"] = lambda: client.lpush(RAW_KEY, _message())
        variants["aenqueue"] = lambda: job.aenqueue("noop")
        for call in variants.values():
            await call()  # connected
        got = await aalternate(server, n, variants)
        if client is not None:
            await client.aclose()
        return got

    out = asyncio.run(run())
    app.close()
    return out if raw else {"aenqueue": out["aenqueue"]}


def enqueue_many(url: str, n: int, server: Server) -> dict[str, Any]:
    """``n`` jobs in one ``enqueue_many`` call."""
    app, job = _app(url)
    out = once(server, n, lambda: job.enqueue_many([("noop",)] * n, return_refs=False))
    app.close()
    return {"enqueue_many": out}


def raw_pop(backend: str, url: str, n: int, server: Server) -> dict[str, Any]:
    """``n`` preloaded messages popped one by one (``BRPOP``; PostgreSQL ``DELETE``)."""
    if backend == "postgres":
        conn = _pg(url)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO raw_queue (body) VALUES (%s)",
                            [(_message(),) for _ in range(n)])
        sql = ("DELETE FROM raw_queue WHERE id = (SELECT id FROM raw_queue ORDER BY id "
               "FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING body")
        return {"raw_pop": once(server, n, lambda: [conn.execute(sql).fetchone()
                                                    for _ in range(n)])}
    r = redis.RedisCluster(*_host_port(url)) if backend == "cluster" else \
        redis.Redis.from_url(url)
    for start in range(0, n, 1000):
        r.lpush(RAW_KEY, *[_message() for _ in range(min(1000, n - start))])
    return {"raw_pop": once(server, n, lambda: [json.loads(r.brpop([RAW_KEY], 1)[1])
                                                for _ in range(n)])}


def drain(url: str, n: int, server: Server) -> dict[str, Any]:
    """Lease and acknowledge ``n`` preloaded jobs by one worker process (1 × 8); the
    client's CPU is the worker's."""
    from benchmarks import worker_cpu
    from conveyor.core.job import JobState

    app, job = _app(url)
    storage = app.storage
    storage.pause_queue(worker_cpu.QUEUE)
    for start in range(0, n, 5000):
        job.enqueue_many([("noop",)] * min(5000, n - start), return_refs=False)
    total = n + 2  # the warm-up jobs
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

        return {"drain": once(server, total, run, lambda: worker_cpu.cpu_seconds(proc.pid))}
    finally:
        worker_cpu.stop(proc)
        app.close()


def child(argv: list[str]) -> None:
    """One case in this interpreter: prints ``RESULT {json}`` (variant -> result)."""
    case, backend, url, n, pid, raw = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4]), \
        argv[5] == "raw"
    server = Server(backend, url, pid)
    if case == "push":
        got = push(backend, url, n, server, raw)
    elif case == "apush":
        got = apush(backend, url, n, server, raw)
    elif case == "enqueue_many":
        got = enqueue_many(url, n, server)
    elif case == "raw_pop":
        got = raw_pop(backend, url, n, server)
    else:
        got = drain(url, n, server)
    print("RESULT " + json.dumps(got), flush=True)
