"""conveyor: ``conveyor worker conveyor_peer:app -c C --processes P -q bench``.

The storage URL comes from ``BENCH_CONVEYOR_URL`` (SQLite file, the benchmark redis, a local
Redis Cluster, or the suite's PostgreSQL with ``?schema=bench``), the broker URL, if any, from
``BENCH_CONVEYOR_BROKER`` (the suite's RabbitMQ). Every job is tracked (record + events), as
conveyor always does.
"""

from __future__ import annotations

import glob
import os
import resource
import sys
import time
from typing import Any

import body
from common import QUEUE, Peer, main, paced, pg_bytes, pg_truncate

import redis
from conveyor import Conveyor
from conveyor import chain as conveyor_chain

PG_SCHEMA = "bench"  # the suite's conveyor (postgres) URL ends with ?schema=bench
BROKER = os.environ.get("BENCH_CONVEYOR_BROKER") or None
if BROKER and os.environ.get("BENCH_BROKER_EXTRA"):  # options to compare (README)
    BROKER += ("&" if "?" in BROKER else "?") + os.environ["BENCH_BROKER_EXTRA"]
app = Conveyor(os.environ.get("BENCH_CONVEYOR_URL", "memory://"), broker=BROKER)


@app.job(name="job", queue=QUEUE, retry=0)
def job(kind: str, ts: float) -> None:
    """The shared body."""
    body.run(kind, ts)


@app.job(name="ajob", queue=QUEUE, retry=0)
async def ajob(kind: str, ts: float) -> None:
    """The shared body as ``async def`` (conveyor runs it on the worker's event loop)."""
    await body.arun(kind, ts)


@app.job(name="step", queue=QUEUE, retry=0)
def step(count: int) -> int:
    """A chain's step: the previous step's count, plus one."""
    return count + 1


def job_for(kind: str) -> Any:
    """The async job for the asyncio bodies, the thread-pool one for the rest."""
    return ajob if kind in body.ASYNC_KINDS else job


class ConveyorPeer(Peer):
    """conveyor on SQLite, Redis, Redis Cluster or PostgreSQL."""

    name = "conveyor"
    module = "conveyor"

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.storage_url = os.environ["BENCH_CONVEYOR_URL"]

    def reset(self) -> None:
        if self.storage_url.startswith("sqlite:///"):
            for f in glob.glob(self.storage_url[len("sqlite:///"):] + "*"):
                os.unlink(f)
        elif "cluster" in self.storage_url:
            for node in self.storage_url.split("://", 1)[1].split(","):
                redis.Redis.from_url("redis://" + node).flushall()
        elif self.storage_url.startswith("postgres"):
            # empty the tables, keep the migrated schema (its functions, triggers, version)
            pg_truncate(self.storage_url.split("?")[0], PG_SCHEMA,
                        keep=("schema_version", "function_version"))
        # Open the storage now, outside every timing: the other peers' clients are made when
        # their module is imported, while conveyor imports its backend (and, without cached
        # bytecode, compiles it) at the first enqueue, which W1 bulk would otherwise count.
        assert app.storage is not None

    def enqueue_each(self, kind: str, n: int, interval: float = 0.0) -> None:
        enqueue = job_for(kind).enqueue
        for _ in paced(n, interval):
            enqueue(kind, time.time())

    def enqueue_bulk(self, kind: str, n: int) -> None:
        job_for(kind).enqueue_many([(kind, 0.0)] * n)

    def batch(self, n: int, timeout: float) -> None:
        with app.batch() as b:
            job.enqueue_many([("noop", 0.0)] * n)
        if hasattr(b, "wait"):
            b.wait(timeout)  # woken as the batch finishes (conveyor.client.batch.wait_batch)
            return
        # BENCH_SRC of a release before Batch.wait (2026-11-27): read every millisecond
        deadline = time.monotonic() + timeout
        while not app.storage.get_batch(b.id).complete:  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise TimeoutError("batch not complete")
            time.sleep(0.001)

    def fanout(self, n: int, timeout: float) -> None:
        wf = app.workflow()
        parts = wf.add_group([job.s("noop", 0.0) for _ in range(n)])
        last = wf.add(job.s("noop", 0.0), after=parts)
        wf.enqueue()
        deadline = time.monotonic() + timeout
        while (rec := app.get_job(last.id)) is None or rec.state.value != "succeeded":
            if time.monotonic() > deadline:
                raise TimeoutError("callback did not run")
            time.sleep(0.001)

    def chain(self, n: int, timeout: float) -> None:
        run = conveyor_chain(*(step.s(0) if i == 0 else step.s() for i in range(n))).enqueue()
        if run.result(timeout=timeout) != n:
            raise AssertionError("the chain's last step did not count every step")

    def preload_batch(self, n: int) -> None:
        with app.batch():
            job.enqueue_many([("noop", 0.0)] * n)

    def storage_bytes(self) -> int | None:
        """SQLite: the database file plus its WAL; Cluster: used_memory summed over its
        masters; PostgreSQL: ``pg_total_relation_size`` of every table of the schema (heap,
        TOAST, indexes); Redis: None (the driver reads the benchmark server's INFO)."""
        if self.storage_url.startswith("sqlite:///"):
            path = self.storage_url[len("sqlite:///"):]
            return sum(os.path.getsize(f) for f in glob.glob(path + "*"))
        if "cluster" in self.storage_url:
            return sum(int(redis.Redis.from_url("redis://" + node).info("memory")["used_memory"])
                       for node in self.storage_url.split("://", 1)[1].split(","))
        if self.storage_url.startswith("postgres"):
            return pg_bytes(self.storage_url.split("?")[0], PG_SCHEMA)
        return None

    def w_bigbatch(self) -> dict[str, Any]:
        """A batch of ``n`` jobs: creation time, client peak memory, status-read time."""
        n = self.cfg["n"]
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        with app.batch() as b:
            for start in range(0, n, 10_000):
                job.enqueue_many([("noop", 0.0)] * min(10_000, n - start))
        created = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t1 = time.perf_counter()
        status = app.batch_status(b.id)
        read = time.perf_counter() - t1
        return {"create_seconds": created, "rate": n / created,
                "client_peak_mb": rss1 / 1024, "client_growth_mb": (rss1 - rss0) / 1024,
                "status_read_ms": read * 1000, "total": status["total"]}

    def worker_commands(self, processes: int, concurrency: int) -> list[list[str]]:
        return [[sys.executable, "-m", "conveyor.cli.main", "worker", "conveyor_peer:app",
                 "-c", str(concurrency), "--processes", str(processes), "-q", QUEUE,
                 "--log-level", "WARNING", "--url", self.storage_url,
                 *(["--broker", BROKER] if BROKER else [])]]

    def close(self) -> None:
        app.close()


if __name__ == "__main__":
    main(ConveyorPeer)
