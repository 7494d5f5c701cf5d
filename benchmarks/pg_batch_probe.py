"""Where a W4 batch's time goes on PostgreSQL: the same 5,000 no-op jobs drained with and
without a batch, wall time and CPU (server, worker, this client) of each phase.

    python -m benchmarks.pg_batch_probe --rounds 3

A private PostgreSQL (tests/support), one worker process with 10 slots (as W4 runs it) on a
fresh schema per round, started and warmed up before the clock. Per round and mode:

* ``batch``: ``app.batch()`` around ``enqueue_many`` of the jobs, then ``Batch.wait()``
  (woken by the NOTIFY of the finishing batch), as the suite's conveyor peer waits;
* ``plain``: the same jobs without a batch, waiting on the outcome totals (one row read);

Each line gives the enqueue's wall time, the time until the wait saw the end, and the CPU
seconds the server's processes, the worker's and this process used over the whole of it.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from collections.abc import Callable

import psycopg
from tests.support.postgres_server import PostgresServer

from benchmarks.pg_probe import QUEUE, STATEMENT_SETTINGS, app, fresh, noop, top_statements, worker
from benchmarks.proc_cpu import tree_cpu
from conveyor.core.job import JobState
from conveyor.storage.postgres.connection import parse_postgres_url
from conveyor.storage.postgres.storage import PostgresStorage


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _processed() -> int:
    """Jobs of the probe's queue processed so far (the outcome totals, one row)."""
    store = app.storage
    assert isinstance(store, PostgresStorage)
    row = store._db.read().execute("SELECT coalesce(sum(processed), 0) FROM job_totals "
                                   "WHERE queue = %s", (QUEUE,)).fetchone()
    return int(row[0]) if row else 0


def _round(url: str, n: int, batch: bool, server_pid: int,
           worker_pid: Callable[[], int]) -> dict[str, float]:
    store = app.storage
    processed = _processed
    base = processed()
    cpu0 = (tree_cpu(server_pid), tree_cpu(worker_pid()), _self_cpu())
    t0 = time.perf_counter()
    if batch:
        with app.batch() as b:
            noop.enqueue_many([()] * n)
        t1 = time.perf_counter()
        b.wait(600)
    else:
        noop.enqueue_many([()] * n)
        t1 = time.perf_counter()
        deadline = time.monotonic() + 600
        while processed() - base < n:
            if time.monotonic() > deadline:
                raise TimeoutError("jobs not drained")
            time.sleep(0.001)
    t2 = time.perf_counter()
    cpu1 = (tree_cpu(server_pid), tree_cpu(worker_pid()), _self_cpu())
    if batch:  # complete must mean every job has finished (read after the clock stopped)
        done = store.count_jobs(batch_id=b.id, state=JobState.SUCCEEDED)
        if done != n:
            raise AssertionError(f"batch reported complete with {done} of {n} jobs succeeded")
    return {"enqueue": t1 - t0, "total": t2 - t0, "server": cpu1[0] - cpu0[0],
            "worker": cpu1[1] - cpu0[1], "client": cpu1[2] - cpu0[2]}


def _truncate(url: str) -> None:
    """Empty the schema's tables behind the running worker, as the suite's reset does."""
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{settings.schema}"')
        conn.execute("TRUNCATE jobs, batches, queues, job_totals, minute_totals, workers "
                     "RESTART IDENTITY CASCADE")


def _alter(url: str, sql: str) -> None:
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{settings.schema}"')
        conn.execute(sql.encode())


def main() -> None:
    """Run the rounds, print each and the medians."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="batch,plain")
    parser.add_argument("--truncate", action="store_true",
                        help="empty the tables after the warm-up, as the suite does")
    parser.add_argument("--statements", type=int, default=0, metavar="N",
                        help="print the N statements (nested ones too) that took the most "
                             "server time in each round (pg_stat_statements)")
    parser.add_argument("--alter", default="", metavar="SQL",
                        help="run SQL in each round's schema after the warm-up, before the "
                             "clock: to measure a schema change before writing it")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    results: dict[str, list[dict[str, float]]] = {}
    settings = STATEMENT_SETTINGS if args.statements else {}
    with PostgresServer(settings=settings) as pg:
        assert pg.process is not None
        server_pid = pg.process.pid
        for round_no in range(args.rounds):
            for mode in args.modes.split(","):
                url = fresh(pg.url)
                app.url = url  # the next use opens this round's schema
                with worker(url, slots=10) as proc:
                    base = _processed()
                    noop.enqueue_many([()] * 200)  # the worker is up and warm before the clock
                    deadline = time.monotonic() + 120
                    while _processed() - base < 200:
                        if time.monotonic() > deadline:
                            raise TimeoutError("warm-up not drained")
                        time.sleep(0.01)
                    if args.truncate:
                        _truncate(url)
                    if args.alter:
                        _alter(url, args.alter)
                    r = _round(url, args.jobs, mode == "batch", server_pid, lambda: proc.pid)
                if args.statements:
                    top_statements(pg.url, args.statements)
                app.close()
                results.setdefault(mode, []).append(r)
                print(f"round {round_no + 1} {mode:5}: enqueue {r['enqueue']:.2f} s, "
                      f"complete {r['total']:.2f} s; cpu s: server {r['server']:.2f}, "
                      f"worker {r['worker']:.2f}, client {r['client']:.2f}", flush=True)
    for mode, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"median {mode:5}: enqueue {med['enqueue']:.2f} s, complete {med['total']:.2f} s; "
              f"cpu s: server {med['server']:.2f}, worker {med['worker']:.2f}, "
              f"client {med['client']:.2f}")


if __name__ == "__main__":
    main()
