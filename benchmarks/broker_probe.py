"""Drain through a broker against a drain from the store alone, one worker in this process.

``python -m benchmarks.broker_probe [--jobs 10000] [--store sqlite|memory|redis|postgres]
[--broker memory|rabbitmq] [-c 8] [--rounds 2] [--calls]``: stores ``--jobs`` no-op jobs,
starts one worker (threads, this process) with and without the broker, and prints jobs/s from
the worker's start until the last job body ran (a counter in this process: polling the store
would cost the store more than the jobs do), this process's CPU per job and the servers' (the
PostgreSQL or Redis server's processes and the RabbitMQ node's, read from ``/proc``). Rounds
alternate the two. ``rabbitmq`` starts a private node (tests/support/rabbitmq.py), ``redis`` a
private redis-server, ``postgres`` a private PostgreSQL. ``--calls`` also prints, per drain,
how many times and how long in all the worker called what it waits on (the store's
``dequeue``/``start``/``ack``, the broker's ``consume``/``publish``/``ack``), to see where a
drain's wall time goes; ``--functions`` (PostgreSQL) the server's time inside each of its
functions per job drained (``track_functions``), to see which call the server's time goes to.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import resource
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import psycopg
from tests.support.postgres_server import PostgresServer
from tests.support.rabbitmq import RabbitServer
from tests.support.redis_server import RedisServer

from benchmarks.proc_cpu import tree_cpu
from conveyor import Conveyor, JobState
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Calls:
    """Counts and wall time of the calls ``wrap`` instruments, from every thread."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self._lock = threading.Lock()

    def wrap(self, obj: Any, name: str, label: str) -> None:
        """Time ``obj.name`` under ``label`` (an instance attribute shadows the method)."""
        fn = getattr(obj, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    entry = self.totals[label]
                    entry[0] += 1
                    entry[1] += time.perf_counter() - t0

        setattr(obj, name, timed)

    def report(self, title: str) -> str:
        rows = [f"  {label}: {int(n):,} calls, {t:.2f} s, {t / max(n, 1) * 1e6:.0f} µs each"
                for label, (n, t) in sorted(self.totals.items())]
        return "\n".join([f"  -- {title}", *rows])


def _instrument(launcher: Launcher, calls: Calls) -> None:
    storage = launcher.storage
    for name in ("dequeue", "wait_dequeue", "ack", "start", "publish_due"):
        if hasattr(storage, name):
            calls.wrap(storage, name, f"store.{name}")
    if launcher.feed is not None:
        calls.wrap(launcher.feed.broker, "consume", "broker.consume")
        calls.wrap(launcher.feed.broker, "ack", "broker.ack (feed)")
    if launcher.relay is not None:
        calls.wrap(launcher.relay.broker, "publish", "broker.publish")
        calls.wrap(launcher.relay.broker, "backlog", "broker.backlog")


def drain(store: str, broker: str | None, jobs: int, concurrency: int,
          calls: Calls | None = None, server_url: str = "",
          window: int = 0, servers: tuple[int, ...] = ()) -> tuple[float, float, list[float]]:
    """(jobs/s, CPU µs per job, each of ``servers``' CPU µs per job) for one drain of
    ``jobs`` no-op jobs; ``servers`` are the pids of the server processes to charge."""
    with tempfile.TemporaryDirectory() as tmp:
        tag = uuid.uuid4().hex[:10]
        url = {"memory": "memory://", "redis": f"{server_url}?prefix=p{tag}",
               "postgres": f"{server_url}?schema=p{tag}"}.get(store, f"sqlite:///{tmp}/probe.db")
        target = None if broker is None else (
            f"memory://{tag}" if broker == "memory"
            else f"{broker}{'&' if '?' in broker else '?'}prefix=p{tag}")
        app = Conveyor(url, broker=target)

        ran = itertools.count(1)
        last = [0]

        @app.job(name="probe.noop")
        def noop() -> None:
            last[0] = next(ran)  # atomic under the GIL; no store query while draining

        noop.enqueue_many(([] for _ in range(jobs)), return_refs=False)
        launcher = Launcher(app, WorkerConfig(concurrency=concurrency, relay_window=window))
        if calls is not None:
            _instrument(launcher, calls)
        cpu, start = _cpu(), time.perf_counter()
        served = [tree_cpu(pid) for pid in servers]
        launcher.start()
        try:
            while last[0] < jobs:  # the last body ran (as the suite's W1 counts)
                time.sleep(0.002)
            elapsed, used = time.perf_counter() - start, _cpu() - cpu
            served = [tree_cpu(pid) - was for pid, was in zip(servers, served, strict=True)]
            while app.storage.count_jobs(state=JobState.SUCCEEDED) < jobs:  # not timed
                time.sleep(0.05)
        finally:
            launcher.stop(5)
            app.close()
    return jobs / elapsed, used / jobs * 1e6, [t / jobs * 1e6 for t in served]


def _function_times(url: str, jobs: int = 0, reset: bool = False) -> str:
    """PostgreSQL's time in each function since the last reset, µs per job drained (the
    statistics reach the view once the backends report them: a second after the drain)."""
    with psycopg.connect(url, autocommit=True) as conn:
        if reset:
            conn.execute("SELECT pg_stat_reset()")
            return ""
        time.sleep(1.0)
        rows = conn.execute("SELECT funcname, sum(calls), sum(total_time) FROM "
                            "pg_stat_user_functions GROUP BY funcname ORDER BY 3 DESC "
                            "LIMIT 6").fetchall()
    return "\n".join(f"  {name}: {int(n):,} calls, {ms * 1000 / max(jobs, 1):.0f} µs/job"
                     for name, n, ms in rows)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.broker_probe")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--store", default="sqlite")
    parser.add_argument("--broker", default="memory", choices=("memory", "rabbitmq"))
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window", type=int, action="append",
                        help="the relay's window (repeat to compare; default: the worker's)")
    parser.add_argument("--functions", action="store_true",
                        help="print the PostgreSQL server's time in each function, per job")
    parser.add_argument("--calls", action="store_true",
                        help="print the calls the worker waits on, per drain")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        broker, pids, names = "memory", [], []
        if args.broker == "rabbitmq":
            rabbit = stack.enter_context(RabbitServer())
            broker = rabbit.url
            assert rabbit.process is not None
            pids.append(rabbit.process.pid)
            names.append("RabbitMQ")
        server_url = ""
        if args.store in ("redis", "postgres"):
            server = RedisServer() if args.store == "redis" else PostgresServer(
                settings={"track_functions": "all"} if args.functions else None)
            server.start()
            stack.callback(server.cleanup)
            server_url = server.url
            assert server.process is not None
            pids.insert(0, server.process.pid)
            names.insert(0, args.store)
        print("| round | worker | jobs/s | CPU µs/job | "
              + "".join(f"{name} CPU µs/job | " for name in names)
              + "\n|---|---|---|---|" + "---|" * len(names))
        for n in range(args.rounds):
            runs = [("store only", None, 0)] + [
                (f"+ {args.broker}" + (f" window {w}" if w else ""), broker, w)
                for w in (args.window or [0])]
            for label, via, window in runs:
                calls = Calls() if args.calls else None
                if args.functions:
                    _function_times(server_url, reset=True)
                rate, cpu, served = drain(args.store, via, args.jobs, args.concurrency, calls,
                                          server_url, window, tuple(pids))
                print(f"| {n + 1} | {args.store} {label} | {rate:,.0f} | {cpu:.0f} | "
                      + "".join(f"{t:.0f} | " for t in served), flush=True)
                if calls is not None:
                    print(calls.report(f"{args.store} {label}"), flush=True)
                if args.functions:
                    print(_function_times(server_url, jobs=args.jobs), flush=True)


if __name__ == "__main__":
    main()
