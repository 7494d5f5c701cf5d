"""No-op throughput of one worker process (not a test; speed is for benchmarks, not asserts).

    python -m tests.integration.throughput redis 60000 20     # a fresh local redis-server
    python -m tests.integration.throughput sqlite 30000 20    # a SQLite file in a temp dir
    python -m tests.integration.throughput memory 50000 20

Enqueues N jobs, runs an in-process ``Launcher`` with concurrency C until every outcome is
written, and prints jobs/s and the worker's CPU time per job.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import tempfile
import time
from collections.abc import Iterator

from conveyor import Conveyor
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.support.redis_server import RedisServer


@contextlib.contextmanager
def storage_url(kind: str) -> Iterator[str]:
    """A URL of a fresh storage of ``kind`` (redis, sqlite or memory)."""
    if kind == "redis":
        with RedisServer() as server:
            yield server.url
    elif kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db"
    else:
        yield "memory://"


def measure(url: str, jobs: int, concurrency: int) -> tuple[float, float]:
    """(jobs per second, worker CPU microseconds per job)."""
    app = Conveyor(url)

    @app.job(name="noop")
    def noop() -> None:
        return None

    for start in range(0, jobs, 5000):
        noop.enqueue_many([((), {})] * min(5000, jobs - start))
    launcher = Launcher(app, WorkerConfig(concurrency=concurrency))
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    launcher.start()
    while launcher.acker.written < jobs and time.perf_counter() - started < 300:
        time.sleep(0.002)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    launcher.stop(5)
    app.close()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return jobs / elapsed, cpu / jobs * 1e6


def main(argv: list[str]) -> None:
    """Parse ``KIND [N] [C]`` and print one result line."""
    kind = argv[0] if argv else "memory"
    jobs = int(argv[1]) if len(argv) > 1 else 20_000
    concurrency = int(argv[2]) if len(argv) > 2 else 20
    with storage_url(kind) as url:
        rate, cpu = measure(url, jobs, concurrency)
    print(f"{kind}: {jobs} no-op jobs, -c {concurrency}: {rate:,.0f} jobs/s, "
          f"worker CPU {cpu:.1f} us/job")


if __name__ == "__main__":
    main(sys.argv[1:])
