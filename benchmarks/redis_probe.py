"""Throughput and memory probe for the Redis storage (not a test; run it by hand):

    python -m benchmarks.redis_probe [--jobs 100000]

Starts its own redis-server, then measures bulk enqueue, one-by-one enqueue, a no-op drain
(dequeue many + ack many) by one process, and ``MEMORY USAGE`` per pending and finished job.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable

import redis
from benchmarks.servers import RedisServer
from conveyor.core.ids import new_id
from conveyor.core.job import Ack, JobSpec, Outcome
from conveyor.storage import open_storage
from conveyor.storage.redis.storage import RedisStorage

PAYLOAD = '{"a":[1,2],"k":{}}'


def specs(n: int, queue: str = "default") -> list[JobSpec]:
    """``n`` small jobs."""
    return [JobSpec(id=new_id(), name="bench.noop", queue=queue, payload=PAYLOAD)
            for _ in range(n)]


class Meter:
    """Wall time plus the CPU time of this process and of redis-server: on a busy machine the
    CPU times show what the code costs, the wall time what the machine allowed."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def redis_cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def measure(self, label: str, n: int, fn: Callable[[], object]) -> None:
        """Run ``fn`` and print jobs/s by wall clock and by CPU-time bottleneck."""
        r0, p0, w0 = self.redis_cpu(), time.process_time(), time.perf_counter()
        fn()
        wall = time.perf_counter() - w0
        py, rd = time.process_time() - p0, self.redis_cpu() - r0
        print(f"{label:<30} {n:>7} jobs  wall {n / wall:>9,.0f}/s  "
              f"(python cpu {py:6.2f} s, redis cpu {rd:6.2f} s: "
              f"{n / max(py, rd, 1e-9):>9,.0f}/s if each had a core)")


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


def wake_latency(store: RedisStorage, url: str, samples: int = 200) -> list[float]:
    """Seconds from an enqueue to the return of another connection's blocked ``wait``."""
    waiter = open_storage(url)
    out: list[float] = []
    for i in range(samples):
        woke = threading.Event()
        stamp: list[float] = []

        def block(stamp: list[float] = stamp, woke: threading.Event = woke) -> None:
            waiter.wait(["latency"], 5.0)
            stamp.append(time.perf_counter())
            woke.set()

        thread = threading.Thread(target=block)
        thread.start()
        time.sleep(0.002)  # let the waiter block
        start = time.perf_counter()
        store.enqueue([JobSpec(id=f"lat{i}", name="bench.noop", queue="latency",
                               payload=PAYLOAD)])
        woke.wait(5.0)
        thread.join()
        out.append(stamp[0] - start)
        store.dequeue(["latency"], "probe", 10, 60)
    waiter.close()
    return sorted(out)


def main() -> None:
    """Run the probe."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    opts = parser.parse_args()
    server = RedisServer()
    try:
        _probe(server.url, opts)
    finally:
        server.stop()


def _probe(url: str, opts: argparse.Namespace) -> None:
    store = open_storage(url + "?prefix=probe")
    assert isinstance(store, RedisStorage)
    client = redis.Redis.from_url(url)
    meter = Meter(client)
    bulk = specs(opts.jobs)
    meter.measure("bulk enqueue (one call)", opts.jobs, lambda: store.enqueue(bulk))
    print(f"memory per pending job: {memory_per_job(client, 'probe', opts.jobs):.0f} B")
    meter.measure(f"drain (dequeue/ack {opts.batch})", opts.jobs,
                  lambda: drain(store, opts.batch))
    print(f"memory per finished job: {memory_per_job(client, 'probe', opts.jobs):.0f} B")
    single = specs(opts.single, queue="single")
    meter.measure("enqueue one by one", opts.single,
                  lambda: [store.enqueue([spec]) for spec in single])
    lat = wake_latency(store, url + "?prefix=probe")
    print(f"wake-up after enqueue: median {lat[len(lat) // 2] * 1e3:.2f} ms, "
          f"p90 {lat[int(len(lat) * 0.9)] * 1e3:.2f} ms")
    store.close()


if __name__ == "__main__":
    main()
