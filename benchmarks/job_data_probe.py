"""What job data costs (docs/job-data.md): enqueue and drain with typed arguments, sealed
(AES-GCM) and with 1 MB payloads by reference, beside plain JSON, on Redis, SQLite and
PostgreSQL; and what a store holds for 1 MB payloads by reference against inline.

    python -m benchmarks.job_data_probe --jobs 2000 --rounds 3            # run it quiet
    python -m benchmarks.job_data_probe --jobs 100 --rounds 1 --big 20    # a smoke run
    python -m benchmarks.job_data_probe --memory 10000                    # store memory

* **enqueue / drain**: ``--jobs`` single enqueues of one variant (``plain``: a dict of ten
  fields; ``typed``: the same as a pydantic model, validated at enqueue and made a model in
  the job; ``dataclass``: as a dataclass without pydantic's help; ``sealed``: the plain dict
  sealed with ``Keys``), then ``conveyor.testing.drain`` runs them (lease, open, run, seal the
  result, ack, one at a time: the per-job work, not a worker's concurrency). ``big`` does
  ``--big`` jobs of a 1 MB argument kept in a blob directory (``Offload``). Microseconds per
  job, the median of ``--rounds``, variants alternating within a round.
* **typed cost alone**: ``CallShape.convert`` and ``load`` of one call, no store (the cost a
  typed parameter adds to every enqueue and every run).
* **memory** (``--memory N``): N jobs of a 1 MB argument stored inline (``max_payload``
  raised to allow it) and N by reference, on a private redis-server each: ``used_memory``
  after the enqueues (Redis holds everything in memory; SQLite and PostgreSQL would hold the
  same bytes on disk). ``--memory 10000`` needs about 14 GB free for the inline side and
  10 GB of disk for the blobs: run it alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pydantic

import redis
from benchmarks.servers import PostgresBench, RedisServer
from conveyor import Conveyor, Keys, Offload
from conveyor.core.calls import CallShape
from conveyor.testing import drain

MB = 1024 * 1024


class Order(pydantic.BaseModel):
    id: int
    customer: str
    sku: str
    qty: int
    price: float
    currency: str
    note: str
    rush: bool
    lines: list[int]
    region: str


# The same fields as a dataclass (typed without pydantic's models).
OrderData: Any = dataclasses.make_dataclass(
    "OrderData", [(name, field.annotation) for name, field in Order.model_fields.items()])


FIELDS: dict[str, Any] = {"id": 7, "customer": "c-123", "sku": "sku-9", "qty": 3,
                          "price": 9.5, "currency": "EUR", "note": "leave at door",
                          "rush": False, "lines": [1, 2, 3], "region": "eu"}


def plain_job(order: dict[str, Any]) -> int:
    return int(order["qty"])


def typed_job(order: Order) -> int:
    return order.qty


def dataclass_job(order: OrderData) -> int:  # type: ignore[valid-type]
    return int(order.qty)


def big_job(blob: str) -> int:
    return len(blob)


def make_app(url: str, variant: str, blobs: str) -> tuple[Conveyor, Any, Any]:
    """The app of one variant and its job, and the argument it enqueues."""
    options: dict[str, Any] = {}
    if variant == "sealed":
        options["encrypt"] = Keys({"k1": Keys.generate()})
    if variant == "big":
        options["offload"] = Offload(store=f"file://{blobs}", threshold=64 * 1024)
    app = Conveyor(url, **options)
    body = {"plain": plain_job, "sealed": plain_job, "typed": typed_job,
            "dataclass": dataclass_job, "big": big_job}[variant]
    fn = app.job(name=f"bench.{variant}")(body)
    arg: Any = {"typed": Order(**FIELDS), "dataclass": OrderData(**FIELDS),
                "big": "x" * MB}.get(variant, FIELDS)
    return app, fn, arg


def one_round(url: str, variant: str, jobs: int, blobs: str) -> tuple[float, float]:
    """(µs per enqueue, µs per drained job) of one variant."""
    app, fn, arg = make_app(url, variant, blobs)
    try:
        fn.enqueue(arg)  # warm: the store opened, its scripts loaded, one job run
        drain(app)
        start = time.perf_counter()
        for _ in range(jobs):
            fn.enqueue(arg)
        enqueued = time.perf_counter()
        ran = drain(app)
        drained = time.perf_counter()
        assert ran == jobs, (variant, ran)
        return ((enqueued - start) / jobs * 1e6, (drained - enqueued) / jobs * 1e6)
    finally:
        app.close()


def typed_alone(count: int) -> dict[str, float]:
    """µs per ``convert`` (enqueue) and ``load`` (run) of one typed call, no store."""
    out: dict[str, float] = {}
    for name, func, arg in (("pydantic", typed_job, Order(**FIELDS)),
                            ("dataclass", dataclass_job, OrderData(**FIELDS)),
                            ("untyped", plain_job, FIELDS)):
        shape = CallShape(func, name)
        args, kwargs = shape.convert([arg], {})
        start = time.perf_counter()
        for _ in range(count):
            shape.convert([arg], {})
        mid = time.perf_counter()
        for _ in range(count):
            shape.load(args, kwargs)
        end = time.perf_counter()
        out[f"{name} convert"] = (mid - start) / count * 1e6
        out[f"{name} load"] = (end - mid) / count * 1e6
    return out


def store_memory(count: int) -> dict[str, float]:
    """Redis ``used_memory`` (MB) after ``count`` jobs of a 1 MB argument, inline and by
    reference (each on a private server)."""
    out: dict[str, float] = {}
    for how in ("inline", "by reference"):
        server = RedisServer()
        try:
            with tempfile.TemporaryDirectory() as blobs:
                options: dict[str, Any] = {"max_payload": 2 * MB}
                if how == "by reference":
                    options["offload"] = Offload(store=f"file://{blobs}", threshold=64 * 1024)
                app = Conveyor(f"{server.url}?prefix=mem", **options)
                fn = app.job(name="bench.big")(big_job)
                before = redis.Redis(port=server.port).info("memory")["used_memory"]
                for _ in range(count):
                    fn.enqueue("x" * MB)
                after = redis.Redis(port=server.port).info("memory")["used_memory"]
                out[how] = (after - before) / MB
                app.close()
        finally:
            server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--big", type=int, default=200, help="jobs of the 1 MB variant")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,redis,postgres")
    parser.add_argument("--memory", type=int, default=0,
                        help="measure Redis memory for this many 1 MB jobs instead")
    args = parser.parse_args()
    if args.memory:
        for how, mb in store_memory(args.memory).items():
            print(f"redis used_memory, {args.memory:,} jobs of 1 MB {how}: {mb:,.1f} MB")
        return
    for name, micros in typed_alone(2000).items():
        print(f"{name:>18}: {micros:7.1f} µs per call")
    servers: list[Callable[[], None]] = []
    urls: dict[str, Callable[[str], str]] = {}
    stores = args.stores.split(",")
    if "redis" in stores:
        server = RedisServer()
        servers.append(server.stop)
        urls["redis"] = lambda tag: f"{server.url}?prefix={tag}"
    if "postgres" in stores:
        pg = PostgresBench()
        servers.append(pg.stop)
        urls["postgres"] = lambda tag: f"{pg.url}?schema={tag}"
    variants = ("plain", "typed", "dataclass", "sealed", "big")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if "sqlite" in stores:
                urls["sqlite"] = lambda tag: f"sqlite:///{tmp}/{tag}.db"
            results: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for r in range(args.rounds):
                for store, url in urls.items():
                    for variant in variants:
                        tag = f"r{r}{variant}"
                        jobs = args.big if variant == "big" else args.jobs
                        results.setdefault((store, variant), []).append(
                            one_round(url(tag), variant, jobs, f"{tmp}/{tag}-blobs"))
            print(f"{'store':>9} {'variant':>10} {'enqueue µs':>11} {'drain µs':>10}")
            for (store, variant), rows in results.items():
                enq = statistics.median(e for e, _ in rows)
                dr = statistics.median(d for _, d in rows)
                print(f"{store:>9} {variant:>10} {enq:11.0f} {dr:10.0f}")
    finally:
        for stop in servers:
            stop()


if __name__ == "__main__":
    main()
