"""Durable jobs beside DBOS (issue 55; not a test, run it by hand on a quiet machine):

    python -m benchmarks.durable_probe [--stores sqlite,postgres,redis] [--jobs 2000]
        [--steps 10] [--sleepers 10000] [--sleep 30] [--spread 20] [--slots 8] [--rounds 3]
        [--no-dbos]

Starts a private redis-server and PostgreSQL, then for each store (and DBOS on SQLite and
PostgreSQL, from the ``dbos`` venv, ``benchmarks/.venvs/dbos``):

* **steps**: ``jobs`` jobs of ``steps`` no-op steps, and as many of none, on one worker of
  ``slots`` slots (DBOS: a queue of ``slots`` workers polled every 50 ms), timed from the
  first enqueue to the last result, alternated ``rounds`` times (medians): jobs/s, steps/s,
  and what one step costs (the slot time the steps added, per step);
* **sleepers**: ``sleepers`` jobs that each sleep until their own wake time (spread over
  ``spread`` s, starting ``sleep`` s out) on the same ``slots``: how late they woke (p50, p99),
  the worker's resident memory and CPU while they sleep, the store's memory (Redis
  ``used_memory``; the durable tables on PostgreSQL; the file on SQLite). DBOS runs them
  twice: on its queue of ``slots`` (a sleeping workflow holds its slot) and each started at
  once (a thread each).

Prints a table and writes ``benchmarks/results/<stamp>-durable.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from tests.support.postgres_server import PostgresServer

import redis as redis_py
from benchmarks.servers import RedisServer
from benchmarks.suite import VENV_REQS, ensure_venv
from conveyor import Conveyor, JobState, current_job
from conveyor.client.registry import JobFunction

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
WORKER_LOG = os.path.join(tempfile.gettempdir(), "conveyor-durable-probe-worker.log")
QUEUE = "durable"

def _noop() -> None:
    return None


def steps(n: int) -> int:
    """``n`` no-op steps: the engine's cost of recording them is what is measured."""
    ctx = current_job()
    for i in range(n):
        ctx.step(f"s{i}", _noop)
    return n


def sleeper(wake_at: float) -> float:
    """Sleep until ``wake_at`` without holding a slot; returns how late it woke."""
    current_job().sleep_until(wake_at)
    return time.time() - wake_at


def register(target: Conveyor) -> dict[str, JobFunction]:
    """The probe's jobs on ``target`` (the worker's app, and each run's client)."""
    return {name: target.job(name=name, queue=QUEUE, retry=0)(fn)
            for name, fn in (("probe.steps", steps), ("probe.sleeper", sleeper))}


# The worker imports this module for its app: the URL comes from the worker's --url.
app = Conveyor(os.environ.get("PROBE_URL", "memory://"))
register(app)


@contextmanager
def worker(url: str, slots: int) -> Iterator[subprocess.Popen[bytes]]:
    """One worker process (one process, ``slots`` slots) on ``url`` while the block runs."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    with open(WORKER_LOG, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor.cli.main", "worker", "benchmarks.durable_probe:app",
             "-c", str(slots), "--processes", "1", "-q", QUEUE, "--log-level", "WARNING",
             "--url", url], cwd=ROOT, env=dict(os.environ, PROBE_URL=url, PYTHONPATH=path),
            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(60)


def proc_stats(pid: int) -> tuple[float, float]:
    """(resident MB, CPU seconds) of a process, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _done(store: Any, count: int) -> bool:
    return int(store.count_jobs(state=JobState.SUCCEEDED, queue=QUEUE)) >= count


def _wait(store: Any, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _done(store, count):
        if time.monotonic() > deadline:
            raise SystemExit(f"durable_probe: {count} jobs not done after {timeout:.0f} s")
        time.sleep(0.05)


def run_steps(url: str, jobs: int, n: int, slots: int) -> dict[str, float]:
    """``jobs`` jobs of ``n`` no-op steps, from the first enqueue to the last success."""
    client = Conveyor(url)
    try:
        with worker(url, slots):
            time.sleep(2.0)  # the worker is up and idle
            started = time.perf_counter()
            register(client)["probe.steps"].enqueue_many([(n,)] * jobs)
            _wait(client.storage, jobs, 600)
            elapsed = time.perf_counter() - started
    finally:
        client.close()
    return {"jobs_per_s": jobs / elapsed, "steps_per_s": jobs * n / elapsed,
            "seconds": elapsed}


def store_bytes(url: str, redis_url: str | None) -> float:
    """What the store holds, in MB: the file, the durable tables, or Redis' used memory."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1]
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p)) / 1e6
    if url.startswith("redis"):
        assert redis_url is not None
        return float(redis_py.Redis.from_url(redis_url).info("memory")["used_memory"]) / 1e6
    conninfo, _, schema = url.partition("?schema=")
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            "SELECT sum(pg_total_relation_size(quote_ident(%s) || '.' || t)) FROM unnest("
            "ARRAY['jobs', 'durable_steps', 'durable_waits', 'durable_inbox']) AS t",
            (schema,)).fetchone()
    return float(row[0] or 0) / 1e6 if row else 0.0


def run_sleepers(url: str, count: int, sleep: float, spread: float, slots: int,
                 redis_url: str | None) -> dict[str, float]:
    """``count`` sleepers on ``slots`` slots: lateness, worker and store while asleep."""
    client = Conveyor(url)
    try:
        with worker(url, slots) as proc:
            time.sleep(2.0)
            first = time.time() + sleep
            wakes = [first + spread * i / max(count - 1, 1) for i in range(count)]
            cpu0 = proc_stats(proc.pid)[1]
            register(client)["probe.sleeper"].enqueue_many([(w,) for w in wakes])
            while client.storage.count_jobs(state=JobState.SCHEDULED, queue=QUEUE) < count:
                if time.time() > first:
                    raise SystemExit("durable_probe: the sleepers did not all fall asleep in "
                                     "time: raise --sleep")
                time.sleep(0.1)
            asleep_at = time.time()
            rss_asleep, cpu_asleep = proc_stats(proc.pid)
            stored = store_bytes(url, redis_url)
            time.sleep(max(0.0, first - 1.0 - time.time()))
            idle_cpu = (proc_stats(proc.pid)[1] - cpu_asleep) / max(first - 1.0 - asleep_at,
                                                                   1e-9)
            _wait(client.storage, count, sleep + spread + 600)
            rss_end, cpu_end = proc_stats(proc.pid)
        late = sorted(float(r.result or 0) for r in client.storage.list_jobs(
            state=JobState.SUCCEEDED, queue=QUEUE, limit=count))
    finally:
        client.close()
    return {"lateness_p50": statistics.median(late), "lateness_p99": late[int(0.99 * (
        len(late) - 1))], "fall_asleep_s": asleep_at - (first - sleep),
        "worker_rss_mb_asleep": rss_asleep, "worker_cpu_s_to_sleep": cpu_asleep - cpu0,
        "worker_cpu_share_asleep": idle_cpu, "worker_rss_mb_end": rss_end,
        "worker_cpu_s_total": cpu_end - cpu0, "store_mb_asleep": stored}


def run_dbos(config: dict[str, Any]) -> dict[str, Any]:
    """One case of ``peers/dbos_durable.py`` in the ``dbos`` venv."""
    py = ensure_venv("dbos", sys.stderr)
    script = os.path.join(ROOT, "benchmarks", "peers", "dbos_durable.py")
    out = subprocess.run([py, script, json.dumps(config)], capture_output=True, text=True,
                         timeout=3600, check=False)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"durable_probe: DBOS failed:\n{out.stderr[-2000:]}")
    return dict(json.loads(line[len("RESULT "):]))


def _rounds(rounds: int, run: Any, args: argparse.Namespace
            ) -> tuple[dict[str, float], dict[str, float]]:
    """Jobs of no step and of ``args.steps`` steps, alternated ``rounds`` times (so both see
    the same load): the median of each figure, and the slot time one step costs."""
    plain: list[dict[str, float]] = []
    stepped: list[dict[str, float]] = []
    for _ in range(rounds):
        plain.append(run(0))
        stepped.append(run(args.steps))

    def median(runs: list[dict[str, float]]) -> dict[str, float]:
        return {k: statistics.median(r[k] for r in runs) for k in runs[0]}

    out_plain, out_stepped = median(plain), median(stepped)
    out_stepped["ms_per_step"] = 1000 * (out_stepped["seconds"] - out_plain["seconds"]) / (
        args.jobs * args.steps) * args.slots
    return out_plain, out_stepped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sleepers", type=int, default=10_000)
    parser.add_argument("--sleep", type=float, default=30.0)
    parser.add_argument("--spread", type=float, default=20.0)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-dbos", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    stores = args.stores.split(",")
    results: dict[str, dict[str, Any]] = {}
    tmp = tempfile.mkdtemp(prefix="durable-probe-")
    with PostgresServer() as pg:
        redis_server = RedisServer() if "redis" in stores else None
        try:
            def url_of(store: str) -> str:
                tag = uuid.uuid4().hex[:8]
                if store == "sqlite":
                    return f"sqlite:///{tmp}/{tag}.db"
                if store == "postgres":
                    return f"{pg.url}?schema=d{tag}"
                assert redis_server is not None
                return f"{redis_server.url}?prefix=d{tag}"

            for store in stores:
                plain, stepped = _rounds(args.rounds, lambda n, store=store: run_steps(
                    url_of(store), args.jobs, n, args.slots), args)
                results[f"conveyor ({store}) steps"] = stepped
                results[f"conveyor ({store}) no steps"] = plain
                results[f"conveyor ({store}) sleepers"] = run_sleepers(
                    url_of(store), args.sleepers, args.sleep, args.spread, args.slots,
                    redis_server.url if redis_server is not None else None)
                print(json.dumps({k: v for k, v in results.items() if store in k}, indent=1),
                      flush=True)
            if not args.no_dbos:
                for store, dbos_url in (("sqlite", f"sqlite:///{tmp}/dbos.sqlite"),
                                        ("postgres", f"{pg.url.rsplit('/', 1)[0]}/dbos")):
                    if store not in stores:
                        continue
                    base = {"url": dbos_url, "concurrency": args.slots, "jobs": args.jobs}
                    plain, stepped = _rounds(args.rounds, lambda n, base=base: run_dbos(
                        {**base, "case": "steps", "steps": n}), args)
                    results[f"DBOS ({store}) steps"] = stepped
                    results[f"DBOS ({store}) no steps"] = plain
                    for mode in ("queued", "start_workflow"):
                        results[f"DBOS ({store}) sleepers, {mode}"] = run_dbos({
                            **base, "case": "sleep", "jobs": args.sleepers, "mode": mode,
                            "sleep": args.sleep, "spread": args.spread})
                    print(json.dumps({k: v for k, v in results.items() if "DBOS" in k},
                                     indent=1), flush=True)
        finally:
            if redis_server is not None:
                redis_server.stop()
    os.makedirs(RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(RESULTS, f"{stamp}-durable.json"), "w") as f:
        json.dump({"args": vars(args), "dbos": VENV_REQS.get("dbos"), "results": results}, f,
                  indent=1)
    for name, values in results.items():
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in values.items())
        print(f"{name:<40} {shown}")


if __name__ == "__main__":
    main()
