"""Many waits at once: connections they hold, failures, and how soon they all return.

    python -m benchmarks.waits_probe --waits 150

A private redis-server and a private PostgreSQL with ``max_connections=100`` (its default);
per store, ``--waits`` jobs, then:

* ``aresult``: that many ``await ref.aresult()`` on one event loop, a thread acknowledging
  the jobs one by one (as a worker would) once every wait registered;
* ``batch.wait``: that many threads, each waiting for a batch of its own through the store's
  waiter (``Storage.batch_finished``), the jobs acknowledged the same way.

Each line gives the connections the waits hold while they all wait (Redis: subscribed
clients; PostgreSQL: all of conveyor's backends), the waits that failed (by exception) and
the seconds from the first acknowledgement until the last wait returned.
``BENCH_SRC=<checkout>/src`` runs another release's code.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

if os.environ.get("BENCH_SRC"):
    sys.path.insert(0, os.environ["BENCH_SRC"])

import psycopg
from tests.api.helpers import echo_job, run_by_hand
from tests.support.postgres_server import PostgresServer

import redis
from benchmarks.servers import RedisServer
from conveyor import Conveyor
from conveyor.client.refs import JobRef


def _count(what: Callable[[], int]) -> int:
    try:
        return what()
    except Exception:
        return -1


def probe_aresult(app: Conveyor, n: int, connections: Callable[[], int]) -> str:
    job = echo_job(app)
    ids = [job.enqueue(i).id for i in range(n)]

    async def main() -> tuple[int, float, list[Any]]:
        waits = [asyncio.create_task(JobRef(i, True, app.client).aresult(timeout=60))
                 for i in ids]
        await asyncio.sleep(2)  # every wait in place (or failed)
        held = _count(connections)
        t0 = time.perf_counter()
        try:
            for _ in ids:
                await asyncio.to_thread(run_by_hand, app)
        except Exception as exc:  # the store refused the acks too: the waits cannot end
            for wait in waits:
                wait.cancel()
            print(f"  (acks failed: {type(exc).__name__}: {str(exc)[-80:]})")
        out = await asyncio.gather(*waits, return_exceptions=True)
        return held, time.perf_counter() - t0, out

    held, took, out = asyncio.run(main())
    return _line("aresult", n, held, took, out)


def probe_batch_wait(app: Conveyor, n: int, connections: Callable[[], int]) -> str:
    job = echo_job(app)
    batch_ids = []
    for i in range(n):
        with app.batch() as batch:
            job.enqueue(i)
        batch_ids.append(batch.id)
    ready = threading.Barrier(n + 1, timeout=60)
    out: list[Any] = [None] * n

    def wait(k: int) -> None:
        try:
            with app.storage.batch_finished(batch_ids[k]) as waiter:
                ready.wait()
                out[k] = waiter.wait(60) or TimeoutError("not woken within 60 s")
        except Exception as exc:
            out[k] = exc
            ready.abort()

    threads = [threading.Thread(target=wait, args=(k,)) for k in range(n)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        ready.wait()
    held = _count(connections)
    t0 = time.perf_counter()
    try:
        for _ in batch_ids:
            run_by_hand(app)
    except Exception as exc:  # the store refused the acks too: the waits time out
        print(f"  (acks failed: {type(exc).__name__}: {str(exc)[-80:]})")
    for thread in threads:
        thread.join()
    return _line("batch.wait", n, held, time.perf_counter() - t0, out)


def _line(what: str, n: int, held: int, took: float, out: list[Any]) -> str:
    failed = collections.Counter(type(o).__name__ for o in out if isinstance(o, BaseException))
    return (f"  {what:<10} {n} waits: {held} connections while waiting, "
            f"failed: {dict(failed) or 0}, all returned {took:.2f} s after the first ack")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waits", type=int, default=150)
    args = parser.parse_args()
    server = RedisServer()
    try:
        admin = redis.Redis.from_url(server.url)
        print(f"redis {server.version()}")
        for probe in (probe_aresult, probe_batch_wait):
            app = Conveyor(f"{server.url}?prefix=p{uuid.uuid4().hex[:8]}")
            # subscribers: a pooled connection idle between calls is not held by a wait
            print(probe(app, args.waits, lambda: len(admin.client_list(_type="pubsub"))))
            app.close()
    finally:
        server.stop()
    with PostgresServer(settings={"max_connections": "100"}) as pg:
        conn = psycopg.connect(pg.url, autocommit=True)
        print(f"postgresql {pg.version}, max_connections 100")

        def backends() -> int:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                               "WHERE application_name LIKE 'conveyor%'").fetchone()
            return int(row[0]) if row else -1

        for probe in (probe_aresult, probe_batch_wait):
            app = Conveyor(f"{pg.url}?schema=p{uuid.uuid4().hex[:8]}")
            print(probe(app, args.waits, backends))
            app.close()
        conn.close()


if __name__ == "__main__":
    main()
