"""The per-peer driver: one workload, measured the same way for every engine.

An adapter script (``peers/<engine>.py``) subclasses ``Peer`` with its engine's enqueue, bulk
enqueue, worker start-up and batch API, then calls ``main(PeerClass)``. The driver reads the
JSON config from argv[1], runs the workload, and prints one JSON result line on stdout.

Completion is the same for everyone: each worker process adds its finished jobs to
``bench:done`` in the benchmark redis (every 2 ms, see ``body.py``) with the wall-clock span
they finished in; the driver polls the counter every millisecond and times drains and live runs
by the reported spans.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from importlib import metadata
from typing import Any

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
DONE_KEY = "bench:done"
LAT_KEY = "bench:lat"
SPAN_KEY = "bench:span"
CPU_KEY = "bench:cpu"
QUEUE = "bench"


class Unsupported(Exception):
    """The engine has no API for this workload (reported as n/a, never as a failure)."""


class Peer:
    """One engine under test. Subclasses override what their engine offers."""

    name = "peer"
    module = ""  # the import name of the engine package, for its version

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.url: str = cfg["redis_url"]

    # --- client side -----------------------------------------------------------------
    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        """Enqueue ``n`` jobs one call each; ``interval`` > 0 paces them (latency run)."""
        raise NotImplementedError

    def enqueue_bulk(self, kind: str, n: int) -> None:
        """Enqueue ``n`` jobs with the engine's own bulk API."""
        raise Unsupported("no bulk enqueue API")

    def batch(self, n: int, timeout: float) -> None:
        """Create a batch/group of ``n`` no-op jobs and return when the engine says it is done."""
        raise Unsupported("no batch/group API with per-job status")

    def fanout(self, n: int, timeout: float) -> None:
        """Enqueue ``n`` no-op jobs and one callback that runs after all of them (a chord, a
        workflow's fan-in) and return when the callback has run."""
        raise Unsupported("no fan-out with a callback")

    def chain(self, n: int, timeout: float) -> None:
        """Enqueue a chain of ``n`` steps, each getting the previous one's result (the
        previous count, plus one), and return when the last has run with ``n``."""
        raise Unsupported("no chain of jobs")

    def preload_batch(self, n: int) -> None:
        """Enqueue ``n`` no-op jobs as one batch without waiting for it (tracking overhead)."""
        raise Unsupported("no batch API")

    # --- workers -----------------------------------------------------------------------
    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        """One command line per OS-level worker launch."""
        raise NotImplementedError

    def storage_bytes(self) -> int | None:
        """Bytes of storage outside the benchmark redis, or None to read redis INFO."""
        return None

    def reset(self) -> None:
        """Empty any storage outside the benchmark redis (conveyor's SQLite file, cluster)."""

    def close(self) -> None:
        """Release client connections."""

    def version(self) -> str:
        """The engine's installed version."""
        try:
            return metadata.version(self.module or self.name)
        except Exception:
            return "?"


def paced(n: int, interval: float) -> Any:
    """Yield ``n`` times, sleeping so that yields are ``interval`` apart (no drift)."""
    start = time.perf_counter()
    for i in range(n):
        if interval:
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        yield i


async def apaced(n: int, interval: float) -> Any:
    """``paced`` for asyncio adapters: yield ``n`` times ``interval`` apart, sleeping on the
    event loop."""
    start = time.perf_counter()
    for i in range(n):
        if interval:
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        yield i


class Driver:
    """Runs one workload against one peer and measures it."""

    def __init__(self, peer: Peer, cfg: dict[str, Any]) -> None:
        self.peer = peer
        self.cfg = cfg
        self.r = redis.Redis.from_url(cfg["redis_url"])
        self.workers: list[subprocess.Popen[bytes]] = []

    def reset(self) -> None:
        self.r.delete(DONE_KEY, LAT_KEY, SPAN_KEY, CPU_KEY)

    @property
    def body(self) -> str:
        """The job body of this run (``noop`` unless the workload names one)."""
        return str(self.cfg.get("body", "noop"))

    def cpu_per_job(self) -> float | None:
        """Worker CPU seconds per job between each worker process's first completion and its
        last report, summed over the processes (None where no process reported CPU)."""
        cpu = jobs = 0.0
        for raw in self.r.hvals(CPU_KEY):
            first, now, total = raw.split()
            cpu += float(now) - float(first)
            jobs += int(total) - 1
        return cpu / jobs if jobs > 0 else None

    def count(self) -> int:
        return int(self.r.get(DONE_KEY) or 0)

    def wait_count(self, target: int, timeout: float) -> float:
        """Poll the completion counter every 1 ms; the perf_counter time it reached ``target``."""
        deadline = time.perf_counter() + timeout
        while True:
            now = time.perf_counter()
            if self.count() >= target:
                return now
            if now > deadline:
                raise TimeoutError(f"{self.count()}/{target} jobs completed after {timeout}s")
            self.check_workers()
            time.sleep(0.001)

    def span(self) -> tuple[float, float]:
        """Wall-clock times of the first and the last completion the workers reported."""
        spans = [tuple(map(float, x.split())) for x in self.r.lrange(SPAN_KEY, 0, -1)]
        return min(s[0] for s in spans), max(s[1] for s in spans)

    def start_workers(self, processes: int, concurrency: int) -> None:
        # the commands first: an adapter may set its workers' environment there (SAQ's and
        # procrastinate's concurrency)
        commands = self.peer.worker_commands(processes, concurrency)
        env = dict(os.environ)
        env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
        env["BENCH_DONE_URL"] = self.cfg["redis_url"]
        log = open(  # noqa: SIM115 - handed to the worker processes, closed by exit
            os.path.join(self.cfg.get("log_dir", "/tmp"), f"{self.peer.name}.log"), "ab")
        for cmd in commands:
            self.workers.append(subprocess.Popen(
                cmd, cwd=HERE, env=env, stdout=log, stderr=log, start_new_session=True))

    def check_workers(self) -> None:
        for p in self.workers:
            if p.poll() is not None:
                raise RuntimeError(f"worker {p.args} exited with {p.returncode}")

    def stop_workers(self) -> None:
        for p in self.workers:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.workers:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.workers = []

    def warm_up(self, processes: int, concurrency: int) -> None:
        """Wait until the workers run jobs (the run's own body, so that an asyncio engine has
        its loop and connections up), then let them go idle and zero the counter."""
        n = max(20, 2 * processes * concurrency)
        self.reset()
        self.peer.enqueue_each(self.body, n)
        self.wait_count(n, 180)
        time.sleep(0.5)
        self.reset()

    def preload(self, kind: str, n: int) -> None:
        try:
            self.peer.enqueue_bulk(kind, n)
        except Unsupported:
            self.peer.enqueue_each(kind, n)

    # --- workloads -------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        workload = self.cfg["workload"]
        fn = getattr(self, "w_" + workload, None) or getattr(self.peer, "w_" + workload)
        self.r.flushdb()  # the suite's redis is private to it: every run starts empty
        self.peer.reset()
        folder = os.environ.get("BENCH_SQLITE_DIR")
        for f in glob.glob(os.path.join(folder, "body-*.db*")) if folder else ():
            os.unlink(f)  # the sqlite body's files of earlier runs
        if self.body == "pg":  # the PostgreSQL body's table: made here, once, and emptied
            from body import PG_TABLE
            pg_exec(pg_url("bench_body"), PG_TABLE, "TRUNCATE io")
        try:
            return dict(fn())
        finally:
            self.stop_workers()
            self.peer.close()

    def w_enqueue_one(self) -> dict[str, Any]:
        n = self.cfg["n"]
        t0 = time.perf_counter()
        self.peer.enqueue_each("noop", n)
        dt = time.perf_counter() - t0
        return {"seconds": dt, "rate": n / dt}

    def w_enqueue_bulk(self) -> dict[str, Any]:
        n = self.cfg["n"]
        t0 = time.perf_counter()
        self.peer.enqueue_bulk("noop", n)
        dt = time.perf_counter() - t0
        return {"seconds": dt, "rate": n / dt}

    def _drain(self, kind: str) -> dict[str, Any]:
        """Preloaded queue, workers started after: first completion to last completion."""
        n, p, c = self.cfg["n"], self.cfg["processes"], self.cfg["concurrency"]
        self.preload(kind, n)
        self.start_workers(p, c)
        self.wait_count(n, self.cfg.get("timeout", 600))
        first, last = self.span()
        dt = last - first
        out: dict[str, Any] = {"seconds": dt, "rate": (n - 1) / dt if dt > 0 else 0.0}
        cpu = self.cpu_per_job()
        if cpu is not None:
            out["cpu_us_per_job"] = cpu * 1e6
        return out

    def w_drain(self) -> dict[str, Any]:
        return self._drain(self.body)

    def w_live(self) -> dict[str, Any]:
        n, p, c = self.cfg["n"], self.cfg["processes"], self.cfg["concurrency"]
        self.start_workers(p, c)
        self.warm_up(p, c)
        t0 = time.time()
        self.peer.enqueue_each(self.body, n)
        t_enq = time.time() - t0
        self.wait_count(n, self.cfg.get("timeout", 600))
        dt = self.span()[1] - t0
        return {"seconds": dt, "rate": n / dt, "enqueue_seconds": t_enq}

    def w_latency(self) -> dict[str, Any]:
        n, p, c = self.cfg["n"], self.cfg["processes"], self.cfg["concurrency"]
        self.start_workers(p, c)
        self.warm_up(p, c)
        self.peer.enqueue_each("lat", n, interval=1.0 / self.cfg.get("rate", 100))
        self.wait_count(n, 120)
        lat = sorted(float(x) * 1000 for x in self.r.lrange(LAT_KEY, 0, -1))
        return {"p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "p99_ms": pct(lat, 99),
                "max_ms": lat[-1], "samples": len(lat)}

    def w_io(self) -> dict[str, Any]:
        res = self._drain(self.cfg.get("body", "sleep"))
        n, total = self.cfg["n"], self.cfg["processes"] * self.cfg["concurrency"]
        waves = -(-n // total)
        ideal = (waves - 1) * self.cfg["sleep"]  # first completion ends the first wave
        res["ideal_seconds"] = ideal
        res["efficiency"] = ideal / res["seconds"] if res["seconds"] else 0.0
        return res

    def w_cpu(self) -> dict[str, Any]:
        res = self._drain("cpu")
        n, p = self.cfg["n"], self.cfg["processes"]
        ideal = (-(-n // p) - 1) * self.cfg["cpu_seconds"]
        res["ideal_seconds"] = ideal
        res["efficiency"] = ideal / res["seconds"] if res["seconds"] else 0.0
        return res

    def w_batch(self) -> dict[str, Any]:
        return self._until_done(self.peer.batch)

    def w_fanout(self) -> dict[str, Any]:
        return self._until_done(self.peer.fanout)

    def w_chain(self) -> dict[str, Any]:
        res = self._until_done(self.peer.chain)
        res["ms_per_step"] = res["seconds"] * 1000 / self.cfg["n"]
        return res

    def _until_done(self, run: Any) -> dict[str, Any]:
        """Workers up, then ``run(n, timeout)`` timed: it returns when the engine says done."""
        n, p, c = self.cfg["n"], self.cfg["processes"], self.cfg["concurrency"]
        self.start_workers(p, c)
        self.warm_up(p, c)
        t0 = time.perf_counter()
        run(n, self.cfg.get("timeout", 600))
        dt = time.perf_counter() - t0
        return {"seconds": dt, "rate": n / dt, "counted": self.count()}

    def w_storage(self) -> dict[str, Any]:
        """Redis bytes per pending job and per finished job (the engine's tracked form)."""
        n = self.cfg["n"]
        self.r.delete(DONE_KEY)
        base = self.used_memory()
        self.preload("tracked", n)
        time.sleep(0.2)
        pending = self.used_memory() - base
        self.start_workers(1, self.cfg["concurrency"])
        self.wait_count(n, self.cfg.get("timeout", 600))
        time.sleep(1.0)
        self.stop_workers()
        finished = self.used_memory() - base
        return {"pending_bytes_per_job": pending / n, "finished_bytes_per_job": finished / n}

    def w_overhead(self) -> dict[str, Any]:
        """The cost of batch tracking: drain rate and Redis commands per job, plain jobs
        against the same jobs in one batch (one worker process)."""
        n, c = self.cfg["n"], self.cfg["concurrency"]
        out: dict[str, Any] = {}
        for form, load in (("plain", lambda: self.preload("noop", n)),
                           ("batch", lambda: self.peer.preload_batch(n))):
            self.r.flushdb()
            self.peer.reset()
            load()
            self.r.config_resetstat()
            self.start_workers(1, c)
            self.wait_count(n, self.cfg.get("timeout", 600))
            first, last = self.span()
            self.stop_workers()
            calls = commands(self.r.info("commandstats"))
            out[f"{form}_rate"] = (n - 1) / (last - first)
            out[f"{form}_commands_per_job"] = sum(calls.values()) / n
            out[f"{form}_scripts_per_job"] = calls.get("evalsha", 0) / n
        out["rate"] = out["batch_rate"]
        out["batch_vs_plain"] = out["batch_rate"] / out["plain_rate"]
        return out

    def used_memory(self) -> int:
        own = self.peer.storage_bytes()
        return own if own is not None else int(self.r.info("memory")["used_memory"])


# What the driver and the completion counter send, not the engine.
_BENCH_COMMANDS = {"get", "incrby", "rpush", "lrange", "del", "info", "flushdb", "flushall",
                   "ping", "hello", "select", "config|resetstat", "client|setinfo"}


def commands(stats: dict[str, Any]) -> dict[str, int]:
    """Calls per command from INFO commandstats (commands run inside scripts included),
    without the benchmark's own."""
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    return {k: v for k, v in calls.items() if k not in _BENCH_COMMANDS}


# --- PostgreSQL (the suite's private server; only the PostgreSQL peers' venvs have psycopg) ---

def pg_url(database: str) -> str:
    """The suite's PostgreSQL URL (``BENCH_PG_URL``) with ``database`` in place of its own."""
    base = os.environ["BENCH_PG_URL"].split("?", 1)[0]
    return base.rsplit("/", 1)[0] + "/" + database


def pg_exec(url: str, *statements: str) -> list[Any]:
    """Run ``statements`` in autocommit; the rows of the last one (empty if it returns none)."""
    import psycopg

    rows: list[Any] = []
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in statements:
            cur = conn.execute(sql)
            rows = cur.fetchall() if cur.description else []
    return rows


def pg_tables(url: str, schema: str) -> list[str]:
    """The ordinary (and unlogged) tables of ``schema``, quoted and schema-qualified."""
    rows = pg_exec(url, "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c"
                        " JOIN pg_namespace n ON n.oid = c.relnamespace"
                        f" WHERE c.relkind IN ('r', 'p') AND n.nspname = '{schema}'")
    return [r[0] for r in rows]


def pg_truncate(url: str, schema: str, keep: tuple[str, ...] = ()) -> None:
    """Empty every table of ``schema`` but ``keep`` (schema-version tables): the engine's
    schema stays installed, its rows and their pages go."""
    tables = [t for t in pg_tables(url, schema) if t.rsplit(".", 1)[1] not in keep]
    if tables:
        pg_exec(url, f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")


def pg_reset(url: str, table: str, install: Any) -> None:
    """An engine's database before a run: ``install()`` its schema when ``public.<table>`` is
    missing, else empty every table of ``public``."""
    if pg_exec(url, f"SELECT to_regclass('public.{table}')")[0][0] is None:
        install()
    else:
        pg_truncate(url, "public")


def pg_bytes(url: str, schema: str) -> int:
    """``pg_total_relation_size`` (heap, TOAST and every index) summed over ``schema``'s
    tables."""
    rows = pg_exec(url, "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                        " JOIN pg_namespace n ON n.oid = c.relnamespace"
                        f" WHERE c.relkind IN ('r', 'p') AND n.nspname = '{schema}'")
    return int(rows[0][0])


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``values``."""
    if not values:
        return float("nan")
    k = max(0, min(len(values) - 1, round(q / 100 * len(values) + 0.5) - 1))
    return values[k]


def main(peer_cls: type[Peer]) -> None:
    """Entry point of an adapter: run the configured workload and print one JSON line."""
    cfg = json.loads(sys.argv[1])
    for k, v in cfg.get("env", {}).items():
        os.environ[k] = str(v)
    os.environ["BENCH_DONE_URL"] = cfg["redis_url"]
    sys.path.insert(0, HERE)
    peer = peer_cls(cfg)
    out: dict[str, Any] = {"peer": peer.name, "version": peer.version()}
    try:
        if cfg["workload"] != "version":
            out.update(Driver(peer, cfg).run())
    except Unsupported as exc:
        out["unsupported"] = str(exc)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    out["client_maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("RESULT " + json.dumps(out), flush=True)
