"""A long drain on PostgreSQL with and without the worker's own VACUUM (``Storage.tidy``):

    python -m benchmarks.pg_vacuum_probe [--jobs 300000] [--finished 0,1000000] [--rounds 1]

A private PostgreSQL (tests/support, default settings: autovacuum visits each database once a
minute). For each count of finished jobs already in the table and each round, two fresh
schemas get the same ``--jobs`` no-op jobs, one drained with ``?vacuum=0`` (autovacuum
alone, as before ``tidy``), the other with the default; one worker process with 8 slots each
(``benchmarks.pg_probe.worker``). It prints the rate of every ``--slice`` seconds, the dead
row versions the table held then, VACUUMs by hand and by autovacuum, and the overall rate.
"""

from __future__ import annotations

import argparse
import logging
import time

import psycopg
from tests.support.postgres_server import PostgresServer

from benchmarks.pg_probe import _finished_count, fill_finished, fresh, specs, worker
from conveyor.storage import open_storage
from conveyor.storage.postgres.connection import parse_postgres_url

_STATS = ("SELECT n_dead_tup, vacuum_count, autovacuum_count FROM pg_stat_user_tables "
          "WHERE relid = 'jobs'::regclass")


def drain(url: str, n: int, finished: int, every: float) -> float:
    """Jobs/s of one worker draining ``n`` jobs on a fresh schema at ``url``."""
    if finished:
        fill_finished(url, finished)
    store = open_storage(url)
    settings = parse_postgres_url(url)
    try:
        for start in range(0, n, 20_000):
            store.enqueue(specs(min(20_000, n - start)))
        done = _finished_count(store)
        with psycopg.connect(settings.conninfo, autocommit=True) as conn, worker(url, 8):
            conn.execute(f'SET search_path TO "{settings.schema}"')
            t0 = last_t = time.perf_counter()
            last = done()
            while last < n:
                time.sleep(every)
                now, count = time.perf_counter(), done()
                dead, by_hand, auto = conn.execute(_STATS).fetchone() or (0, 0, 0)
                print(f"  {now - t0:5.1f} s {count:8,} done {(count - last) / (now - last_t):8,.0f}"
                      f" jobs/s  dead versions {dead:8,}  vacuums {by_hand} by hand, {auto} auto",
                      flush=True)
                last, last_t = count, now
            return n / (time.perf_counter() - t0)
    finally:
        store.close()


def main() -> None:
    """Run the drains, print every slice and the overall rates."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=300_000)
    parser.add_argument("--finished", default="0,1000000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--slice", type=float, default=2.0)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    results: list[str] = []
    with PostgresServer() as pg:
        for finished in (int(f) for f in args.finished.split(",")):
            for round_no in range(args.rounds):
                for vacuum in ("0", "1"):
                    label = (f"{finished:,} finished, vacuum={vacuum}, round {round_no + 1}")
                    print(label, flush=True)
                    rate = drain(f"{fresh(pg.url)}&vacuum={vacuum}", args.jobs, finished,
                                 args.slice)
                    results.append(f"{label}: {rate:,.0f} jobs/s")
    print(f"drain of {args.jobs:,} no-op jobs, 1 process x 8 slots:")
    for line in results:
        print("  " + line)


if __name__ == "__main__":
    main()
