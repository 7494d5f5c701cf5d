"""How long operator actions hold Redis: PING latency from a separate client during the
cancel of a big batch and during renders of its web page (issue #14, item 12).

``python -m benchmarks.admin_stall [--jobs 200000] [--renders 30] [--sqlite]``
``python -m benchmarks.admin_stall --web [--web-jobs 2000] [--arg-kb 100] [--export-rows
100000] [--src PATH/src]`` (the dashboard's long reads: ``benchmarks/web_stall.py``)

Starts its own redis-server (no persistence), enqueues one batch of ``--jobs`` pending jobs,
then, while a thread PINGs every ~1 ms on its own connection, runs: idle (baseline), batch
page renders (the Inspector calls of the web batch page: ``get_batch``, the failed and dead
job lists, one page of the batch's jobs, and its count, at the first and a deep offset), and
``cancel_batch``. Prints each phase's PING p50/p99/max, the slowest Redis command of the
phase (SLOWLOG) and its wall time. ``--sqlite`` also times the same operations on SQLite at
a tenth and the full size, to show whether anything grows faster than linearly.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import redis
from benchmarks import web_stall
from benchmarks.servers import RedisServer
from conveyor.core.ids import new_id
from conveyor.core.job import BatchSpec, JobSpec, JobState
from conveyor.storage import Backend, open_storage

PAGE = 50


def _ping_loop(port: int, stop: Any, out: Any) -> None:
    client = redis.Redis(port=port)
    samples: list[tuple[float, float]] = []
    while not stop.is_set():
        start = time.perf_counter()
        client.ping()
        took = time.perf_counter() - start
        samples.append((time.time(), took * 1000))
        time.sleep(max(0.0, 0.001 - took))
    out.send(samples)


class Pinger:
    """PINGs every ~1 ms from its own process (so the workload's Python never delays it) and
    files each latency under the phase that was running when it was sent."""

    def __init__(self, port: int) -> None:
        self.stopped = multiprocessing.Event()
        self.inbox, outbox = multiprocessing.Pipe(duplex=False)
        self.proc = multiprocessing.Process(target=_ping_loop,
                                            args=(port, self.stopped, outbox), daemon=True)
        self.phases: list[tuple[str, float, float]] = []

    def start(self) -> None:
        """Start pinging."""
        self.proc.start()

    def stop(self) -> dict[str, list[float]]:
        """Stop pinging; the latencies (ms) of each phase."""
        self.stopped.set()
        samples: list[tuple[float, float]] = self.inbox.recv()
        self.proc.join()
        out: dict[str, list[float]] = {name: [] for name, _, _ in self.phases}
        for ts, ms in samples:
            for name, start, end in self.phases:
                if start <= ts <= end:
                    out[name].append(ms)
        return out


def fill(store: Backend, jobs: int) -> str:
    """One closed batch of ``jobs`` pending jobs; returns its id."""
    batch = new_id()
    store.create_batch(BatchSpec(id=batch))
    for start in range(0, jobs, 2000):
        store.enqueue([JobSpec(id=new_id(), name="bench.noop", queue="default",
                               payload='{"a":[]}', batch_id=batch)
                       for _ in range(min(2000, jobs - start))])
    store.close_batch(batch)
    return batch


def render(store: Backend, batch: str, offset: int) -> None:
    """What the web batch page asks the Inspector for, once."""
    store.get_batch(batch)
    for state in (JobState.FAILED, JobState.DEAD):
        store.list_jobs(state=state, batch_id=batch, limit=20, with_events=True)
    store.list_jobs(batch_id=batch, offset=offset, limit=PAGE, with_events=True)
    store.count_jobs(batch_id=batch)
    store.list_jobs(state=JobState.CANCELLED, batch_id=batch, offset=offset, limit=PAGE,
                    with_events=True)
    store.count_jobs(state=JobState.CANCELLED, batch_id=batch)


def renders(store: Backend, batch: str, jobs: int, count: int) -> None:
    """``count`` renders, alternating the first page and one deep in the batch."""
    for i in range(count):
        render(store, batch, 0 if i % 2 == 0 else jobs // 2)


def pct(values: list[float], p: float) -> float:
    """The ``p`` percentile (0..100) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def redis_run(jobs: int, render_count: int) -> list[dict[str, Any]]:
    """Every phase on a private redis-server; returns one row per phase."""
    server = RedisServer()
    raw = redis.Redis(port=server.port)
    store = open_storage(f"{server.url}?prefix=stall")
    pinger = Pinger(server.port)
    rows = []
    try:
        batch = fill(store, jobs)
        pinger.start()
        phases: list[tuple[str, Callable[[], object]]] = [
            ("idle", lambda: time.sleep(1.0)),
            ("batch page renders (pending)", lambda: renders(store, batch, jobs, render_count)),
            ("cancel_batch", lambda: store.cancel_batch(batch)),
            ("batch page renders (cancelled)",
             lambda: renders(store, batch, jobs, render_count)),
        ]
        slowest, over = {}, {}
        for name, action in phases:
            raw.config_set("slowlog-log-slower-than", 500)  # µs; 0 would slow every command
            raw.slowlog_reset()
            start = time.time()
            action()
            pinger.phases.append((name, start, time.time()))
            slow = raw.slowlog_get(1000)
            slowest[name] = max(slow, key=lambda e: e["duration"], default=None)
            over[name] = sum(1 for e in slow if e["duration"] > 5000)
        samples = pinger.stop()
        for name, start, end in pinger.phases:
            worst = slowest[name]
            got = samples[name] or [0.0]
            rows.append({
                "phase": name, "wall_s": end - start, "pings": len(samples[name]),
                "p50_ms": statistics.median(got), "p99_ms": pct(got, 99), "max_ms": max(got),
                "slowest_ms": worst["duration"] / 1000 if worst else 0.0,
                "slowest": _command(worst), "over_5ms": over[name],
            })
    finally:
        if pinger.proc.is_alive():
            pinger.stopped.set()
            pinger.proc.join(5)
        store.close()
        server.stop()
    return rows


def _command(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "-"
    words = entry["command"]
    text = words.decode(errors="replace") if isinstance(words, bytes) else str(words)
    return " ".join(text.split()[:2])


def sqlite_run(jobs: int, render_count: int) -> list[dict[str, Any]]:
    """Wall times of the same operations on SQLite, at ``jobs``."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_storage(f"sqlite:///{os.path.join(tmp, 'stall.db')}")
        batch = fill(store, jobs)
        out = {"jobs": jobs}
        start = time.perf_counter()
        renders(store, batch, jobs, render_count)
        out["render_ms"] = (time.perf_counter() - start) * 1000 / render_count
        start = time.perf_counter()
        store.cancel_batch(batch)
        out["cancel_s"] = time.perf_counter() - start
        store.close()
    return [out]


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--renders", type=int, default=30)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--web", action="store_true",
                        help="instead: /api/stats latency during searches and an export")
    parser.add_argument("--web-jobs", type=int, default=2000)
    parser.add_argument("--arg-kb", type=int, default=100)
    parser.add_argument("--export-rows", type=int, default=100_000)
    parser.add_argument("--src", default=None,
                        help="the conveyor to serve (another checkout's src: before/after)")
    args = parser.parse_args()
    if args.web:
        web_stall.report(args.web_jobs, args.arg_kb, args.export_rows, args.src)
        return
    print(f"Redis, one batch of {args.jobs} pending jobs, PING every ~1 ms from another client")
    print(f"{'phase':32} {'wall s':>7} {'pings':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}"
          "  commands > 5 ms, slowest command")
    for r in redis_run(args.jobs, args.renders):
        print(f"{r['phase']:32} {r['wall_s']:7.2f} {r['pings']:6d} {r['p50_ms']:7.2f} "
              f"{r['p99_ms']:7.2f} {r['max_ms']:7.2f}  {r['over_5ms']}, "
              f"{r['slowest_ms']:.2f} ms {r['slowest']}")
    if args.sqlite:
        print("\nSQLite: the same operations at a tenth and the full size")
        for size in (args.jobs // 10, args.jobs):
            for r in sqlite_run(size, args.renders):
                print(f"{r['jobs']:>8} jobs: render {r['render_ms']:.1f} ms, "
                      f"cancel_batch {r['cancel_s']:.2f} s")


if __name__ == "__main__":
    main()
