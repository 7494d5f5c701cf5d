"""Redis batch membership probe (a benchmark, not a test: run it by hand):

    python -m benchmarks.batch_join_probe [--jobs 1000000] [--per-job]

Starts its own redis-server. Joins ``--jobs`` ids to one batch 2,000 per call, as a bulk
enqueue does before storing each chunk (``batch.lua``, nothing else: no job is stored), and
prints redis-server's CPU per job (INFO ``used_cpu_*``) and the wall clock. By default the
ids travel as runs (docs/internals/redis-batches.md); ``--per-job`` sends them one by one
as every join did before runs (``join`` mode, still taken by ids that do not count up).

Then reads the batch as the dashboard would, each read timed (wall) and counted in
``batch.lua`` calls (``index`` steps of 500 jobs): the first page of all jobs, a page of
pending jobs half way through, the same page again, the count of pending jobs; then moves
the first tenth of the jobs to succeeded as acknowledgements would (500 per call, server CPU
per job) and reads again. The longest single ``batch.lua`` call while reading is Redis's
``SLOWLOG`` maximum.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import redis
from benchmarks.servers import RedisServer
from conveyor.core.ids import new_id, new_ids
from conveyor.core.job import BatchSpec, JobState
from conveyor.storage.redis.storage import RedisStorage, open_redis

CHUNK = 2000


def _cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _calls(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


def _timed(what: str, client: redis.Redis, read: Callable[[], object]) -> None:
    calls, start = _calls(client), time.perf_counter()
    result = read()
    wall = time.perf_counter() - start
    shown = len(result) if isinstance(result, list) else result
    print(f"  {what:<40} {wall * 1000:9.1f} ms  {_calls(client) - calls:5d} script calls  "
          f"-> {shown}", flush=True)


def _longest(client: redis.Redis, what: str) -> None:
    """The longest script call since the last one (SLOWLOG logs every call here)."""
    longest = max((e["duration"] for e in client.slowlog_get(100_000)
                   if e["command"].lower().startswith(b"evalsha")), default=0)
    print(f"  longest script call while {what}: {longest / 1000:.1f} ms", flush=True)
    client.slowlog_reset()


def _join(store: RedisStorage, batch: str, n: int, per_job: bool) -> None:
    for start in range(0, n, CHUNK):
        ids = new_ids(min(CHUNK, n - start))
        if per_job:
            store._batches.batch_call(batch, "join", ["pending:q", "\n".join(ids)])
        else:
            store._batches.join_batch(batch, "pending:q", ids)


def main() -> None:
    """Join, read, print."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--per-job", action="store_true", help="the join before runs")
    args = parser.parse_args()
    server = RedisServer()
    try:
        client = redis.Redis(port=server.port)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        store = open_redis(server.url)
        batch = new_id()
        store.create_batch(BatchSpec(id=batch))
        cpu, start = _cpu(client), time.perf_counter()
        _join(store, batch, args.jobs, args.per_job)
        wall, cpu = time.perf_counter() - start, _cpu(client) - cpu
        how = "one by one" if args.per_job else "as runs"
        print(f"join {args.jobs:,} ids {how}: wall {wall:.2f} s, redis-server cpu {cpu:.2f} s "
              f"= {cpu / args.jobs * 1e6:.3f} µs/job, memory "
              f"{client.info('memory')['used_memory'] / 1e6:.0f} MB", flush=True)
        client.slowlog_reset()
        half = args.jobs // 2
        _timed("page 1 of all jobs (50)", client,
               lambda: store._pages.batch_page(batch, None, None, 0, 50))
        _timed(f"pending jobs at offset {half:,} (50)", client,
               lambda: store._pages.batch_page(batch, JobState.PENDING, None, half, 50))
        _timed("the same page again", client,
               lambda: store._pages.batch_page(batch, JobState.PENDING, None, half, 50))
        _timed("count of pending jobs", client,
               lambda: store._pages.batch_count(batch, JobState.PENDING, None))
        _longest(client, "reading")
        # A worker's part: the first tenth of the jobs succeed, 500 moves per call (as
        # acknowledgements feed batch.lua), then the same reads on the running batch.
        done = args.jobs // 10
        firsts = [job_id for job_id, _ in store._pages.batch_page(batch, None, None, 0, done)]
        cpu, start = _cpu(client), time.perf_counter()
        for at in range(0, done, 500):
            store._graph.sync_batches([(batch, job_id, "succeeded:q")
                                       for job_id in firsts[at:at + 500]])
        cpu = _cpu(client) - cpu
        print(f"moves: {done:,} jobs succeed: wall {time.perf_counter() - start:.2f} s, "
              f"redis-server cpu {cpu / done * 1e6:.2f} µs/job", flush=True)
        _longest(client, "moving")
        _timed("page 1 of pending jobs (50)", client,
               lambda: store._pages.batch_page(batch, JobState.PENDING, None, 0, 50))
        _timed(f"all jobs at offset {half:,} (50)", client,
               lambda: store._pages.batch_page(batch, None, None, half, 50))
        _timed("page 1 of succeeded jobs (50)", client,
               lambda: store._pages.batch_page(batch, JobState.SUCCEEDED, None, 0, 50))
        _longest(client, "reading")
        store.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
