"""What an enqueue inside the application's own PostgreSQL transaction adds (a benchmark, not a
test: it asserts nothing about time).

    python -m benchmarks.pg_tx_probe [--rounds 2000]

Starts a throwaway PostgreSQL (tests/support/postgres_server.py) and times, on one psycopg
connection over TCP to 127.0.0.1, transactions that insert one order row and commit, without
and with ``send_receipt.enqueue(order_id, connection=conn)`` inside; rounds alternate so the
machine's load hits both alike. Prints the median of each and the difference (the issue's
target: under 0.3 ms), the same for an enqueue on conveyor's own connection for scale, and
this process's CPU time per round (steadier than wall time on a busy machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from tests.support.postgres_server import PostgresServer

from conveyor import Conveyor
from conveyor.storage.postgres.connection import parse_postgres_url


def _timed(step: Callable[[], object], cpu: list[float]) -> float:
    start, start_cpu = time.perf_counter(), time.process_time()
    step()
    cpu.append(time.process_time() - start_cpu)
    return time.perf_counter() - start


def main() -> None:
    """Run the probe and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    with PostgresServer() as server:
        app = Conveyor(f"{server.url}?schema=probe")
        job = app.job(name="send_receipt")(lambda order_id: order_id)
        conninfo = parse_postgres_url(server.url).conninfo
        with psycopg.connect(conninfo) as conn:
            conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, total int)")
            conn.commit()

            def plain() -> None:
                with conn.transaction():
                    conn.execute("INSERT INTO orders (total) VALUES (1) RETURNING id").fetchone()

            def enqueued() -> None:
                with conn.transaction():
                    row: Any = conn.execute(
                        "INSERT INTO orders (total) VALUES (1) RETURNING id").fetchone()
                    job.enqueue(row[0], connection=conn)

            for _ in range(200):  # warm up: connections, prepared statements, caches
                plain()
                enqueued()
                job.enqueue(0)
            base, with_job, own = [], [], []
            cpu: tuple[list[float], list[float], list[float]] = ([], [], [])
            for _ in range(rounds):
                base.append(_timed(plain, cpu[0]))
                with_job.append(_timed(enqueued, cpu[1]))
                own.append(_timed(lambda: job.enqueue(0), cpu[2]))
        app.close()
    b, w, o = (statistics.median(x) * 1000 for x in (base, with_job, own))
    cb, cw, co = (statistics.fmean(x) * 1000 for x in cpu)
    print(f"rounds: {rounds}")
    print(f"transaction inserting one order:               {b:.3f} ms (median)")
    print(f"the same with enqueue(order_id, connection=): {w:.3f} ms (median)")
    print(f"added by the enqueue:                          {w - b:.3f} ms")
    print(f"enqueue on conveyor's own connection:          {o:.3f} ms (median, for scale)")
    print(f"this process's CPU per round (mean): plain {cb:.3f} ms, with the enqueue {cw:.3f} ms "
          f"(added {cw - cb:.3f} ms), own-connection enqueue {co:.3f} ms")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
