"""Aggregation probe (a benchmark, not a test: run it by hand):

    python -m benchmarks.aggregation_probe [--members 100000] [--groups 1000] [--only redis]

For SQLite, Redis and PostgreSQL (private servers started here): ``--members`` members of an
aggregated job spread over ``--groups`` groups are enqueued in bulk (``enqueue_many``, so
each group fills to its ``max_size`` and its lead is sent at once), then two worker processes
(concurrency 4 each) run every group through the aggregator; then the same number of plain
jobs (the baseline). Prints the enqueue time, the time from the workers' start until the last
job finished, the calls (aggregator runs, or plain job bodies), and on Redis the commands the
server ran per job (``INFO commandstats``, which counts the commands run inside scripts too:
enqueue, the runs, the acks and the workers' polls and heartbeats meanwhile) and the script
calls (EVALSHA: round trips) among them.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from typing import Any

import redis
from benchmarks.servers import PostgresBench, RedisServer
from conveyor import Aggregate, Conveyor, JobState, Member
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.launcher import Launcher


def make_app(url: str, groups: int, size: int) -> Conveyor:
    """The app every process uses: one aggregated job and its aggregator, and the same job
    plain (the baseline)."""
    app = Conveyor(url)

    def key(n: int) -> str:
        return f"g{n % groups}"

    @app.job(name="probe.member", aggregate=Aggregate(key, grace=0.5, max_delay=5,
                                                      max_size=size))
    def member(n: int) -> None: ...

    @app.aggregate(member)
    def write_all(members: list[Member]) -> int:
        with CALLS.get_lock():
            CALLS.value += 1
        return sum(m.args[0] for m in members)

    @app.job(name="probe.plain")
    def plain(n: int) -> int:
        with CALLS.get_lock():
            CALLS.value += 1
        return n

    return app


CALLS = multiprocessing.get_context("fork").Value("i", 0)


def work(url: str, groups: int, size: int, seconds: float) -> None:
    """One worker process, for ``seconds``."""
    app = make_app(url, groups, size)
    launcher = Launcher(app, WorkerConfig(queues=(QueueWeight("default"),), concurrency=4))
    launcher.start()
    time.sleep(seconds)
    launcher.stop()


def probe(name: str, url: str, members: int, groups: int, job: str,
          commands: Callable[[], dict[str, int]] | None = None) -> None:
    """Enqueue, run, print the figures."""
    size = max(members // groups, 1)
    app = make_app(url, groups, size)
    fn = app.registry.get(job)
    assert fn is not None
    CALLS.value = 0
    before = commands() if commands else {}
    start = time.perf_counter()
    fn.enqueue_many([(n,) for n in range(members)], return_refs=False)
    enqueued = time.perf_counter() - start
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=work, args=(url, groups, size, 600.0)) for _ in range(2)]
    start = time.perf_counter()
    for p in procs:
        p.start()
    while app.storage.count_jobs(state=JobState.SUCCEEDED) < members:
        time.sleep(0.05)
    ran = time.perf_counter() - start
    extra: dict[str, Any] = {}
    if commands:
        after = commands()
        used = {k: v - before.get(k, 0) for k, v in after.items()}
        scripts = used.get("evalsha", 0) + used.get("eval", 0)
        extra["commands per job"] = round(sum(used.values()) / members, 2)
        extra["script calls per job"] = round(scripts / members, 3)
    for p in procs:
        p.terminate()
        p.join()
    what = "members" if job == "probe.member" else "plain jobs"
    print(f"{name:<9} {members:,} {what}: enqueued in {enqueued:.2f} s, all finished "
          f"{ran:.2f} s after the workers started; {CALLS.value:,} calls {extra}", flush=True)
    app.close()


def _redis_calls(url: str) -> Callable[[], dict[str, int]]:
    client = redis.Redis.from_url(url)

    def per_command() -> dict[str, int]:
        stats = client.info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}

    return per_command


def main() -> None:
    """Parse the arguments and probe each store."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--only", choices=("sqlite", "redis", "postgres"))
    args = parser.parse_args()
    for job in ("probe.member", "probe.plain"):
        if args.only in (None, "sqlite"):
            probe("sqlite", f"sqlite:///{tempfile.mkdtemp()}/probe.db", args.members,
                  args.groups, job)
        if args.only in (None, "redis"):
            server = RedisServer()
            try:
                probe("redis", server.url, args.members, args.groups, job,
                      _redis_calls(server.url))
            finally:
                server.stop()
        if args.only in (None, "postgres"):
            pg = PostgresBench()
            try:
                probe("postgres", f"{pg.url}?schema=probe", args.members, args.groups, job)
            finally:
                pg.stop()

if __name__ == "__main__":
    main()
