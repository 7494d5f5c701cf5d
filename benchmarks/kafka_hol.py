"""Head-of-line blocking through Kafka: one slow job in a partition with many fast jobs behind
it (issue 21).

``python -m benchmarks.kafka_hol [--slow 10] [--fast 1000] [-c 8] [--store sqlite|redis]``
starts a private Tansu (tests/support/kafka.py; Kafka-wire, not Apache Kafka), stores one job
that sleeps ``--slow`` seconds and then ``--fast`` jobs of 5 ms, each of its own order key, on
a topic of **one** partition, and runs one worker (threads, this process). It prints when
the last fast job finished and when the slow one did, both from the worker's start and from
the jobs' own records: a consumer that ran its partition in order would finish the fast jobs
after the slow one (``--slow`` seconds at least); conveyor's per-partition window should not.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid

from tests.support.kafka import TansuServer
from tests.support.redis_server import RedisServer

from conveyor import Conveyor, JobState
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher


def run(store_url: str, broker_url: str, slow: float, fast: int, concurrency: int) -> dict[
        str, float]:
    """One measurement: seconds from the worker's start to the last fast job's end and to
    the slow job's end."""
    app = Conveyor(store_url, broker=broker_url)

    @app.job(name="hol.step", order_key=lambda key, seconds: key)
    def step(key: str, seconds: float) -> None:
        time.sleep(seconds)

    slow_ref = step.enqueue("slow", slow)
    fast_refs = [step.enqueue(f"acct:{i}", 0.005) for i in range(fast)]
    launcher = Launcher(app, WorkerConfig(concurrency=concurrency))
    started = time.time()
    launcher.start()
    try:
        while True:
            record = app.get_job(fast_refs[-1].id)
            left = app.storage.count_jobs(state=JobState.PENDING) + \
                app.storage.count_jobs(state=JobState.ACTIVE)
            if left <= 1 and record is not None and record.state is JobState.SUCCEEDED:
                break
            time.sleep(0.02)
        fast_done = time.time() - started
        while (rec := app.get_job(slow_ref.id)) is None or rec.state is not JobState.SUCCEEDED:
            time.sleep(0.05)
        slow_done = time.time() - started
        ends = [r.finished_at or 0.0 for r in (app.get_job(x.id) for x in fast_refs)
                if r is not None]
        first_start = min((r.started_at or 0.0) for r in (app.get_job(x.id) for x in fast_refs)
                          if r is not None)
    finally:
        launcher.stop(30)
        app.close()
    return {"fast_done_s": fast_done, "slow_done_s": slow_done,
            "fast_span_in_records_s": max(ends) - first_start}


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=float, default=10.0)
    parser.add_argument("--fast", type=int, default=1000)
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    parser.add_argument("--store", default="sqlite", choices=("sqlite", "redis"))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with TansuServer() as kafka:
        redis = RedisServer().start() if args.store == "redis" else None
        try:
            for rnd in range(args.rounds):
                tag = uuid.uuid4().hex[:8]
                store = (f"{redis.url}?prefix=h{tag}" if redis is not None
                         else f"sqlite:///{tempfile.mkdtemp(prefix='hol-')}/jobs.db")
                figures = run(store, kafka.broker_url(f"h{tag}", partitions=1), args.slow,
                              args.fast, args.concurrency)
                print(f"round {rnd + 1}: {args.fast} fast jobs behind a {args.slow:g} s job in "
                      f"one partition ({args.store}, -c {args.concurrency}): last fast job "
                      f"done {figures['fast_done_s']:.2f} s after the worker started "
                      f"({figures['fast_span_in_records_s']:.2f} s from the first fast start "
                      f"to the last fast end in the records); the slow job "
                      f"{figures['slow_done_s']:.2f} s", flush=True)
        finally:
            if redis is not None:
                redis.cleanup()


if __name__ == "__main__":
    main()
