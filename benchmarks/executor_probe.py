"""What the process executor costs per job (docs/worker.md, "Executors"), beside threads.

    python -m benchmarks.executor_probe --jobs 2000 --rounds 3           # run it quiet
    python -m benchmarks.executor_probe --jobs 200 --rounds 1 --no-redis # a smoke run

Two measures, each for three job bodies: ``noop`` (returns at once), ``sleep`` (5 ms of
``time.sleep``: I/O that waits) and ``redis`` (one ``PING`` to a private redis-server over
TCP: a real round trip; ``--no-redis`` leaves it out):

* **hop**: the executor alone, one slot. ``--jobs`` leased-job values run one after the other
  through ``Processor.run`` in this thread (what a pool thread does), then through
  ``JobProcesses.run`` to one warm job process (what a pool thread does with
  ``executor="process"``: a JSON frame to the process, the run there, the ``Ack`` back). No
  store is involved; the difference per job is the process executor's own overhead.
* **drain**: a whole worker (``Launcher``, 4 slots) draining ``--jobs`` jobs from a SQLite file
  with ``--executor thread`` and ``--executor process`` (jobs/s from their enqueue to the last
  one's end, once warm: each slot's job process started): the overhead as a worker sees it,
  stores and leases included.

Settings alternate within each round; the medians are printed at the end. Job processes import
this module (``benchmarks.executor_probe:app``), so its jobs are defined at import and the
measuring runs only under ``__main__``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from typing import Any

import redis
from conveyor import Conveyor
from conveyor.core.ids import new_id
from conveyor.core.job import JobState, LeasedJob
from conveyor.core.serializer import encode_payload
from conveyor.worker.config import WorkerConfig
from conveyor.worker.inflight import Entry
from conveyor.worker.job_processes import JobProcesses
from conveyor.worker.launcher import Launcher
from conveyor.worker.processor import Processor

APP = "benchmarks.executor_probe:app"
REDIS_ENV = "EXECUTOR_PROBE_REDIS"
app = Conveyor(os.environ.get("CONVEYOR_URL", "memory://"))
_client: list[redis.Redis] = []  # one connection per process, made on its first job


@app.job(name="probe.noop")
def noop() -> None:
    """Nothing: the executor's cost alone."""


@app.job(name="probe.sleep")
def sleep() -> None:
    """5 ms of waiting, as a call to a slow service."""
    time.sleep(0.005)


@app.job(name="probe.redis")
def ping() -> None:
    """One round trip to the probe's redis-server."""
    if not _client:
        _client.append(redis.Redis.from_url(os.environ[REDIS_ENV]))
    _client[0].ping()


BODIES = {"noop": "probe.noop", "sleep": "probe.sleep", "redis": "probe.redis"}


def _entries(processor: Processor, name: str, n: int) -> list[Entry]:
    payload = encode_payload([], {})
    out = []
    for _ in range(n):
        job = LeasedJob(id=new_id(), name=name, queue="default", payload=payload,
                        token=new_id(), attempt=1, errors=0, max_retries=0, timeout=None,
                        batch_id=None)
        entry = processor.prepare(job)
        assert isinstance(entry, Entry)
        out.append(entry)
    return out


def hop(name: str, n: int, executor: str) -> float:
    """Microseconds per job of ``n`` runs of job ``name`` through ``executor``, one slot."""
    processor = Processor(app, "probe", app.clock)
    pool = JobProcesses(processor, app.clock, {"app": APP, "worker": "probe", "limits": {}})
    try:
        run = pool.run if executor == "process" else processor.run
        run(_entries(processor, name, 1)[0])  # warm: a started process, a Redis connection
        entries = _entries(processor, name, n)
        t0 = time.perf_counter()
        for entry in entries:
            ack = run(entry)
            assert ack.outcome.value == "succeeded", ack
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        pool.close()


def drain(name: str, n: int, executor: str, folder: str) -> float:
    """Jobs/s of one worker process (4 slots, ``executor``) draining ``n`` jobs ``name``,
    from their enqueue to the last one's end, once the worker is warm (one sleep job per
    slot ran first: with ``process``, each slot's job process is started)."""
    app.close()
    app.url = f"sqlite:///{os.path.join(folder, new_id())}.db"
    config = WorkerConfig(concurrency=4, executor=executor, app=APP, poll_interval=(0.02, 0.05))
    launcher = Launcher(app, config)
    fn, warm = app.registry.get(name), app.registry.get("probe.sleep")
    assert fn is not None and warm is not None

    def finished() -> int:
        return app.storage.count_jobs(state=JobState.SUCCEEDED)

    launcher.start()
    try:
        warm.enqueue_many([()] * config.concurrency)
        while finished() < config.concurrency:
            time.sleep(0.002)
        t0 = time.perf_counter()
        fn.enqueue_many([()] * n)
        while finished() < n + config.concurrency:
            time.sleep(0.002)
        t1 = time.perf_counter()
    finally:
        launcher.stop(10)
        app.close()
    return n / (t1 - t0)


def main() -> None:
    """Run the rounds and print the medians."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-redis", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    server: Any = None
    bodies = dict(BODIES)
    if args.no_redis:
        del bodies["redis"]
    else:
        from benchmarks.servers import RedisServer

        server = RedisServer()
        os.environ[REDIS_ENV] = server.url  # job processes inherit it
    hops: dict[tuple[str, str], list[float]] = {}
    drains: dict[tuple[str, str], list[float]] = {}
    try:
        with tempfile.TemporaryDirectory() as folder:
            for round_no in range(args.rounds):
                order = ("thread", "process")[::1 if round_no % 2 == 0 else -1]
                for body, name in bodies.items():
                    for executor in order:
                        us = hop(name, args.jobs, executor)
                        rate = drain(name, args.jobs, executor, folder)
                        hops.setdefault((body, executor), []).append(us)
                        drains.setdefault((body, executor), []).append(rate)
                        print(f"round {round_no + 1} {body:5} {executor:7}: hop {us:8.1f} "
                              f"us/job, drain {rate:8,.0f} jobs/s", flush=True)
    finally:
        if server is not None:
            server.stop()
    print(f"\n{args.jobs:,} jobs per measure, median of {args.rounds} round(s):")
    for body in bodies:
        t = statistics.median(hops[(body, "thread")])
        p = statistics.median(hops[(body, "process")])
        dt = statistics.median(drains[(body, "thread")])
        dp = statistics.median(drains[(body, "process")])
        print(f"  {body:5}  hop: thread {t:7.1f} us, process {p:7.1f} us (+{p - t:6.1f} us "
              f"per job)   drain (4 slots): thread {dt:7,.0f}/s, process {dp:7,.0f}/s "
              f"(x{dp / dt:.2f})")


if __name__ == "__main__":
    main()
