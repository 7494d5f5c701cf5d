"""Drain rate and storage bytes of the PostgreSQL backend (not a test; run it by hand):

    python -m benchmarks.pg_probe [--jobs 20000] [--finished 1000000] [--rounds 3]
                                  [--schemas fresh|kept] [--statements N] [--pg NAME=VALUE]

Starts a private PostgreSQL (``tests/support/postgres_server.py``) and a private redis-server,
then, in rounds that alternate the cases so all see the same load on a shared machine:

* **drain, empty**: N no-op jobs are enqueued in bulk into a fresh schema, then one worker
  (``conveyor worker --processes 1 -c 8``) drains them; the rate is taken between the first
  100 jobs finished and the last (worker start-up is not counted). Progress is read from
  the outcome totals (one row), not by counting jobs, which would take server CPU from the
  drain;
* **drain, 1,000,000 finished**: the same on a schema whose ``jobs`` table already holds that
  many succeeded jobs that finished within the last day (inside retention, so the worker's
  janitor keeps them), inserted by SQL and vacuumed: finished jobs must not slow the hot path
  down;
* **drain on Redis**: the same worker and jobs on ``redis://``, the yardstick of the issue.

Both PostgreSQL schemas are made anew each round (``--schemas fresh``, the big one refilled),
so a round compares an empty table with a big one and nothing else; ``--schemas kept`` keeps
the same two for every round, each carrying the earlier rounds' jobs and dead row versions.
``--statements N`` prints the statements that took the most server time in each drain;
``--pg NAME=VALUE`` sets the private server (``shared_buffers=1GB``).

Then it prints ``pg_total_relation_size`` of the jobs table (heap, TOAST and every index) per
pending job and per finished job.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from tests.support.postgres_server import PostgresServer

from benchmarks.servers import RedisServer
from conveyor import Conveyor
from conveyor.core.ids import new_id
from conveyor.core.job import Ack, JobSpec, JobState, Outcome
from conveyor.storage import Backend, open_storage
from conveyor.storage.postgres.connection import parse_postgres_url
from conveyor.storage.postgres.storage import PostgresStorage

QUEUE = "probe"
PAYLOAD = '{"a":[],"k":{}}'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_LOG = os.path.join(tempfile.gettempdir(), "conveyor-pg-probe-worker.log")
_WARMUP = 100  # jobs leased before the clock starts: the worker is up and running

# The worker imports this module for its app: the URL comes from the worker's --url.
app = Conveyor(os.environ.get("PROBE_URL", "memory://"))


@app.job(name="probe.noop", queue=QUEUE, retry=0)
def noop() -> None:
    """The job: nothing, so the engine is what is measured."""


def specs(n: int) -> list[JobSpec]:
    """``n`` small jobs of the probe's queue."""
    return [JobSpec(id=new_id(), name="probe.noop", queue=QUEUE, payload=PAYLOAD)
            for _ in range(n)]


@contextmanager
def worker(url: str, slots: int = 8,
           extra: tuple[str, ...] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """One worker process on ``url`` (one process, ``slots`` slots, ``extra`` flags), running
    until the block ends."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    with open(WORKER_LOG, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor.cli.main", "worker", "benchmarks.pg_probe:app",
             "-c", str(slots), "--processes", "1", "-q", QUEUE, "--log-level", "WARNING",
             "--url", url, *extra],
            cwd=ROOT, env=dict(os.environ, PROBE_URL=url, PYTHONPATH=path), stdout=log,
            stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(60)


def _finished_count(store: Backend) -> Callable[[], int]:
    """A reader of how many of the probe's jobs have finished so far. On PostgreSQL it reads
    the outcome totals (one row): counting pending jobs instead would take the server CPU
    that the drain being measured needs, every few milliseconds."""
    if isinstance(store, PostgresStorage):
        conn = store._db.read()  # the probe reads the totals table directly

        def processed() -> int:
            row = conn.execute("SELECT coalesce(sum(processed), 0) FROM job_totals "
                               "WHERE queue = %s", (QUEUE,)).fetchone()
            return int(row[0]) if row else 0

        return processed
    total = _waiting(store)  # the drain's jobs are all the queue holds
    return lambda: total - _waiting(store)


def _waiting(store: Backend) -> int:
    """Jobs not yet finished (pending or active)."""
    return sum(store.count_jobs(state=s, queue=QUEUE) for s in (JobState.PENDING, JobState.ACTIVE))


def drain(url: str, n: int, slots: int = 8, extra: tuple[str, ...] = ()) -> float:
    """Jobs/s of one worker (``slots`` slots, ``extra`` flags) draining ``n`` no-op jobs
    enqueued before it starts."""
    store = open_storage(url)
    try:
        store.enqueue(specs(n))
        finished = _finished_count(store)
        base = finished()
        with worker(url, slots, extra):
            deadline = time.monotonic() + 600
            while finished() - base < _WARMUP:
                if time.monotonic() > deadline:
                    raise TimeoutError("the worker never started")
                time.sleep(0.002)
            t0, done0 = time.perf_counter(), finished() - base
            while finished() - base < n:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{n} jobs not drained in time")
                time.sleep(0.005)
            t1 = time.perf_counter()
    finally:
        store.close()
    return (n - done0) / (t1 - t0)


def backend_cpu(store: Backend) -> Callable[[], float]:
    """A reader of the CPU seconds used so far by the server process serving ``store``'s
    connection on this thread (the probe runs on the server's machine)."""
    pid = int(store.now() and store._db.read().execute(  # type: ignore[attr-defined]
        "SELECT pg_backend_pid()").fetchone()[0])
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return read


def storage_loop(url: str, n: int, batch: int = 8) -> tuple[float, float]:
    """(jobs/s, server CPU µs per job) of this process leasing ``batch`` jobs and
    acknowledging them, one dequeue and one ack call per round, until ``n`` are done: the
    storage alone, without a worker around it."""
    store = open_storage(url)
    try:
        store.enqueue(specs(n))
        cpu = backend_cpu(store)
        c0, t0, done = cpu(), time.perf_counter(), 0
        while done < n:
            jobs = store.dequeue([QUEUE], "probe", batch, 60.0)
            if not jobs:
                break
            store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs])
            done += len(jobs)
        wall, server = time.perf_counter() - t0, cpu() - c0
    finally:
        store.close()
    return done / wall, server / max(done, 1) * 1e6


def fresh(server_url: str) -> str:
    """A schema of its own on the probe's server."""
    return f"{server_url}?schema=p{uuid.uuid4().hex[:10]}"


def fill_finished(url: str, count: int) -> None:
    """``count`` succeeded jobs, written by SQL as a finished job looks, then vacuumed. They
    finished within the last day: inside the default retention (7 days), so the worker's
    janitor keeps them, as it keeps the jobs a busy system finished this week."""
    open_storage(url).close()  # creates and migrates the schema
    settings = parse_postgres_url(url)
    start = time.time() - 86_400
    step = 80_000 / max(count, 1)  # spread over the day before the probe
    events = ('{"t":1700000000.0,"k":"enqueued","s":"pending"}\n'
              '{"t":1700000000.1,"k":"started","s":"active","w":"host:1:abcd","a":1}\n'
              '{"t":1700000000.2,"k":"succeeded","s":"succeeded","w":"host:1:abcd","a":1}\n')
    with psycopg.connect(settings.conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{settings.schema}"')
        conn.execute(
            "INSERT INTO jobs (id, name, queue, payload, state, attempt, created_at, ready_at, "
            "started_at, finished_at, worker, events) "
            "SELECT 'f' || lpad(g::text, 23, '0'), 'probe.noop', %s, %s, 'succeeded', 1, "
            "%s + g * %s, %s + g * %s, %s + g * %s + 0.1, %s + g * %s + 0.2, 'host:1:abcd', %s "
            "FROM generate_series(1, %s) AS g",
            (QUEUE, PAYLOAD, start, step, start, step, start, step, start, step, events, count))
        conn.execute("VACUUM ANALYZE jobs")


def relation_bytes(url: str) -> int:
    """``pg_total_relation_size`` of the schema's jobs table: heap, TOAST and indexes."""
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as conn:
        row = conn.execute("SELECT pg_total_relation_size(%s)",
                           (f'"{settings.schema}".jobs',)).fetchone()
    return int(row[0]) if row else 0


def vacuum(url: str, full: bool = False) -> None:
    """VACUUM (FULL) ANALYZE the schema's jobs table."""
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as conn:
        conn.execute(f'VACUUM {"FULL " if full else ""}ANALYZE "{settings.schema}".jobs')


def storage_bytes(server_url: str, n: int) -> tuple[float, float]:
    """(bytes per pending job, bytes per finished job) of the jobs table and its indexes."""
    url = fresh(server_url)
    open_storage(url).close()
    vacuum(url, full=True)
    empty = relation_bytes(url)
    store = open_storage(url)
    store.enqueue(specs(n))
    store.close()
    vacuum(url, full=True)
    pending = (relation_bytes(url) - empty) / n
    with worker(url):
        store = open_storage(url)
        deadline = time.monotonic() + 600
        while _waiting(store) and time.monotonic() < deadline:
            time.sleep(0.01)
        store.close()
    vacuum(url, full=True)
    return pending, (relation_bytes(url) - empty) / n


STATEMENT_SETTINGS = {"shared_preload_libraries": "'pg_stat_statements'",
                      "pg_stat_statements.track": "all"}


def top_statements(url: str, n: int) -> None:
    """Print the ``n`` statements with the most execution time since the last call, and reset."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows = conn.execute(
            "SELECT total_exec_time, calls, rows, "
            "left(regexp_replace(query, '\\s+', ' ', 'g'), 110) "
            "FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT %s", (n,)).fetchall()
        conn.execute("SELECT pg_stat_statements_reset()")
    for ms, calls, nrows, query in rows:
        print(f"  {ms:9.1f} ms {calls:7} calls {nrows:7} rows  {query}")


def main() -> None:
    """Run the rounds and print the medians."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument("--storage-only", action="store_true",
                        help="only the storage loop (dequeue 8 + ack 8), no worker")
    parser.add_argument("--pg", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of the private server (repeatable), e.g. "
                             "shared_buffers=1GB")
    parser.add_argument("--statements", type=int, default=0, metavar="N",
                        help="after each drain, print the N statements (nested ones too) that "
                             "took the most server time (pg_stat_statements)")
    parser.add_argument("--schemas", choices=("fresh", "kept"), default="fresh",
                        help="fresh: both schemas made anew each round (each round compares "
                             "an empty table with one of N finished jobs, nothing else); kept: "
                             "the same two schemas for every round, which carry the earlier "
                             "rounds' jobs and dead index entries until autovacuum")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    rates: dict[str, list[float]] = {"empty": [], "finished": [], "redis": []}
    pg_settings = {**(STATEMENT_SETTINGS if args.statements else {}),
                   **dict(item.split("=", 1) for item in args.pg)}
    with PostgresServer(settings=pg_settings) as pg:
        redis_server = None if args.no_redis else RedisServer()
        try:
            def finished_schema() -> str:
                url = fresh(pg.url)
                t0 = time.perf_counter()
                fill_finished(url, args.finished)
                print(f"{args.finished:,} finished jobs written in "
                      f"{time.perf_counter() - t0:.0f} s; jobs table "
                      f"{relation_bytes(url) / 1e6:,.0f} MB", flush=True)
                return url

            empty, full = fresh(pg.url), finished_schema()
            for round_no in range(args.rounds):
                if args.schemas == "fresh" and round_no:
                    empty, full = fresh(pg.url), finished_schema()
                for label, target in (("empty", empty), ("finished", full)):
                    rate, server = storage_loop(target, args.jobs)
                    print(f"storage loop, {label}: {rate:,.0f} jobs/s, "
                          f"server {server:,.0f} µs cpu/job", flush=True)
                if args.storage_only:
                    continue
                for label, target in (("empty", empty), ("finished", full)):
                    if args.statements:
                        top_statements(pg.url, 0)  # reset
                    rates[label].append(drain(target, args.jobs))
                    if args.statements:
                        print(f"-- {label}:")
                        top_statements(pg.url, args.statements)
                if redis_server is not None:
                    redis_url = f"{redis_server.url}?prefix=p{uuid.uuid4().hex[:8]}"
                    rates["redis"].append(drain(redis_url, args.jobs))
                print(f"round {round_no + 1}: " + ", ".join(
                    f"{k} {v[-1]:,.0f}/s" for k, v in rates.items() if v), flush=True)
            if args.storage_only:
                return
            pending, finished = storage_bytes(pg.url, args.jobs)
        finally:
            if redis_server is not None:
                redis_server.stop()
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    print(f"drain of {args.jobs:,} no-op jobs, 1 process x 8 slots (median of {args.rounds}):")
    print(f"  postgres, empty tables:            {med['empty']:>8,.0f} jobs/s")
    print(f"  postgres, {args.finished:,} finished:  {med['finished']:>8,.0f} jobs/s "
          f"({med['finished'] / med['empty']:.0%} of empty)")
    if "redis" in med:
        print(f"  redis:                             {med['redis']:>8,.0f} jobs/s "
              f"(postgres empty = {med['empty'] / med['redis']:.2f}x redis)")
    print(f"worker logs (warnings and errors): {WORKER_LOG}")
    print(f"jobs table + indexes: {pending:,.0f} bytes per pending job, "
          f"{finished:,.0f} bytes per finished job (after VACUUM FULL)")


if __name__ == "__main__":
    main()
