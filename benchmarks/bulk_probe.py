"""Bulk enqueue probe (issue #17's bulk target; a benchmark, not a test: run it by hand):

    python -m benchmarks.bulk_probe [--jobs 100000] [--batch-jobs 1000000]
                                    [--backends redis,sqlite] [--no-refs] [--stats]

Starts its own redis-server and a SQLite file in a temporary directory. Per backend it runs,
each in a fresh interpreter (so the peak RSS is the case's own):

* ``plain``: ``fn.enqueue_many(items)`` of ``--jobs`` jobs (refs returned, as the suite's
  W1 does; ``--no-refs`` for ``return_refs=False``);
* ``batch``: a batch of ``--batch-jobs`` jobs enqueued 10,000 at a time inside
  ``with app.batch()``, as the suite's ``bigbatch`` does (refs on);
* ``stream`` (``--cases plain,batch,stream``): the same batch in one ``enqueue_many`` call
  fed by a generator, ``return_refs=False``: how a million-job batch is written with
  bounded memory.

Prints jobs/s by wall clock, the client's CPU seconds, redis-server's CPU seconds (INFO
``used_cpu_*``; SQLite works inside the client) and the client's peak RSS. ``--stats`` adds
Redis ``INFO commandstats`` (calls and µs per call, scripts' inner commands included).
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from benchmarks.servers import RedisServer

ITEM = ("noop", 0.0)  # what the suite's peers enqueue


def _case(url: str, kind: str, n: int, refs: bool) -> dict[str, Any]:
    """One measurement in this (fresh) process."""
    from conveyor import Conveyor

    app = Conveyor(url)
    fn = app.job(name="bench.noop")(_noop)
    fn.enqueue_many([ITEM], return_refs=False)  # open the storage, load the scripts
    server = redis.Redis.from_url(url) if url.startswith("redis") else None
    if server is not None:
        server.config_resetstat()
    cpu0 = _server_cpu(server)
    p0, w0 = time.process_time(), time.perf_counter()
    if kind == "plain":
        fn.enqueue_many([ITEM] * n, return_refs=refs)
    elif kind == "stream":  # one call, items from a generator, no refs: bounded memory
        with app.batch():
            fn.enqueue_many((ITEM for _ in range(n)), return_refs=False)
    else:
        with app.batch():
            for start in range(0, n, 10_000):
                fn.enqueue_many([ITEM] * min(10_000, n - start))
    wall = time.perf_counter() - w0
    out = {"wall": wall, "client_cpu": time.process_time() - p0,
           "server_cpu": _server_cpu(server) - cpu0,
           "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "stats": _commandstats(server) if server is not None else {}}
    app.close()
    return out


def _noop(*args: Any) -> None:
    """The job (never run here)."""


def _server_cpu(server: redis.Redis | None) -> float:
    if server is None:
        return 0.0
    info = server.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _commandstats(server: redis.Redis) -> dict[str, tuple[int, float]]:
    stats = server.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(s["calls"]), float(s["usec_per_call"]))
            for name, s in stats.items() if name != "cmdstat_config"}


def _run(url: str, kind: str, n: int, refs: bool) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_case, (url, kind, n, refs))


def _report(backend: str, kind: str, n: int, r: dict[str, Any], stats: bool) -> None:
    print(f"{backend:<7} {kind:<6} {n:>9,} jobs  {n / r['wall']:>9,.0f} jobs/s  "
          f"wall {r['wall']:6.2f} s  client cpu {r['client_cpu']:6.2f} s  "
          f"server cpu {r['server_cpu']:6.2f} s  client peak rss {r['rss_mb']:5.0f} MB",
          flush=True)
    if stats:
        top = sorted(r["stats"].items(), key=lambda kv: -kv[1][0] * kv[1][1])[:8]
        for name, (calls, per) in top:
            print(f"        {name:<12} {calls:>8} calls  {per:>10.1f} µs/call  "
                  f"{calls * per / n:6.2f} µs/job")


def main() -> None:
    """Run the cases asked for and print one line each."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch-jobs", type=int, default=1_000_000)
    parser.add_argument("--backends", default="redis,sqlite")
    parser.add_argument("--cases", default="plain,batch")
    parser.add_argument("--no-refs", action="store_true", help="plain: return_refs=False")
    parser.add_argument("--stats", action="store_true", help="Redis INFO commandstats")
    args = parser.parse_args()
    for backend in args.backends.split(","):
        for kind in args.cases.split(","):
            n = args.jobs if kind == "plain" else args.batch_jobs  # batch and stream
            with tempfile.TemporaryDirectory() as tmp:
                server = RedisServer() if backend == "redis" else None
                try:
                    url = server.url if server else f"sqlite:///{Path(tmp) / 'bulk.db'}"
                    _report(backend, kind, n, _run(url, kind, n, not args.no_refs), args.stats)
                finally:
                    if server is not None:
                        server.stop()


if __name__ == "__main__":
    main()
