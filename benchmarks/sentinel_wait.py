"""What ``wait_replicas`` costs an enqueue and an ack on a Sentinel-managed primary (issue #19).

``python -m benchmarks.sentinel_wait [--jobs 1000] [--bulk 20000]``

Starts its own group (one primary, two replicas, three Sentinels: ``tests/support``), then
for ``wait_replicas`` 0, 1 and 2: ``--jobs`` enqueues one at a time (median and p99 of one
call), one ``enqueue_many`` of ``--bulk`` jobs (jobs per second), and the lease and ack of
``--jobs`` jobs in acks of 100 (acks per second). Loopback, so the replicas are as close as
they can be: the figures are the least ``WAIT`` can cost.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from tests.support.redis_sentinel import RedisSentinelGroup

from conveyor.app import Conveyor
from conveyor.core.job import Ack, Outcome


def _job(ms: int) -> int:
    return ms


def measure(url: str, jobs: int, bulk: int) -> dict[str, float]:
    """One round of the three measurements on ``url``."""
    app = Conveyor(url)
    job = app.job(name="bench.job")(_job)
    try:
        single = []
        for _ in range(jobs):
            start = time.perf_counter()
            job.enqueue(1)
            single.append(time.perf_counter() - start)
        start = time.perf_counter()
        job.enqueue_many([(1,)] * bulk)
        bulk_rate = bulk / (time.perf_counter() - start)
        leased = app.storage.dequeue(["default"], "bench", jobs, 60.0)
        start = time.perf_counter()
        for first in range(0, len(leased), 100):
            app.storage.ack([Ack(job_id=j.id, token=j.token, outcome=Outcome.SUCCEEDED)
                             for j in leased[first:first + 100]])
        ack_rate = len(leased) / (time.perf_counter() - start)
    finally:
        app.close()
    single.sort()
    return {"enqueue_p50_ms": statistics.median(single) * 1000,
            "enqueue_p99_ms": single[int(len(single) * 0.99) - 1] * 1000,
            "bulk_jobs_per_s": bulk_rate, "acks_per_s": ack_rate}


def main() -> None:
    """Print one line per ``wait_replicas`` value."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--bulk", type=int, default=20000)
    args = parser.parse_args()
    with RedisSentinelGroup() as group:
        for wait in (0, 1, 2):
            query = f"prefix=b{uuid.uuid4().hex[:6]}" + (f"&wait_replicas={wait}" if wait else "")
            figures = measure(group.url(query), args.jobs, args.bulk)
            print(f"wait_replicas={wait}: " + ", ".join(f"{k}={v:.1f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
