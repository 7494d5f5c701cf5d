"""Throughput and memory probe for the Redis storage (not a test; run it by hand):

    python -m tests.redis.perf_probe [--jobs 100000]

Starts its own redis-server, then measures bulk enqueue, one-by-one enqueue, a no-op drain
(dequeue many + ack many) by one process, and ``MEMORY USAGE`` per pending and finished job.
"""

from __future__ import annotations

import argparse
import time

import redis
from conveyor.job import Ack, JobSpec, Outcome, new_id
from conveyor.storage import open_storage
from conveyor.storage.redis.storage import RedisStorage
from tests.support.redis_server import RedisServer

PAYLOAD = '{"a":[1,2],"k":{}}'


def specs(n: int, queue: str = "default") -> list[JobSpec]:
    """``n`` small jobs."""
    return [JobSpec(id=new_id(), name="bench.noop", queue=queue, payload=PAYLOAD)
            for _ in range(n)]


def rate(label: str, n: int, seconds: float) -> None:
    """Print one measurement."""
    print(f"{label:<34} {n:>8} jobs {seconds:8.3f} s {n / seconds:>12,.0f} jobs/s")


def drain(store: RedisStorage, batch: int) -> int:
    """Dequeue and acknowledge until the queue is empty."""
    done = 0
    while True:
        jobs = store.dequeue(["default"], "probe", batch, 60)
        if not jobs:
            return done
        store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs])
        done += len(jobs)


def memory_per_job(client: redis.Redis, prefix: str, n: int) -> float:
    """Bytes per job over every key of the prefix."""
    total = 0
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        total += int(client.memory_usage(key, samples=0) or 0)
    return total / n


def main() -> None:
    """Run the probe."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    opts = parser.parse_args()
    with RedisServer() as server:
        store = open_storage(server.url + "?prefix=probe")
        assert isinstance(store, RedisStorage)
        client = redis.Redis.from_url(server.url)
        bulk = specs(opts.jobs)
        start = time.perf_counter()
        store.enqueue(bulk)
        rate("bulk enqueue (one call)", opts.jobs, time.perf_counter() - start)
        print(f"memory per pending job: {memory_per_job(client, 'probe', opts.jobs):.0f} B")
        start = time.perf_counter()
        drained = drain(store, opts.batch)
        rate(f"drain (dequeue/ack {opts.batch})", drained, time.perf_counter() - start)
        print(f"memory per finished job: {memory_per_job(client, 'probe', opts.jobs):.0f} B")
        single = specs(opts.single, queue="single")
        start = time.perf_counter()
        for spec in single:
            store.enqueue([spec])
        rate("enqueue one by one", opts.single, time.perf_counter() - start)
        store.close()


if __name__ == "__main__":
    main()
