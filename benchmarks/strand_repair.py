"""How long one step of the Redis repair pass holds Redis (issue #14, item 2).

``python -m benchmarks.strand_repair [--jobs 200000] [--stranded 3]``

Starts its own redis-server (no persistence), enqueues ``--jobs`` pending jobs, strands
``--stranded`` of them (their list entries removed with raw ``LREM``), then runs one whole
repair pass (``storage/redis/repair.py``) step by step while another process PINGs every
~1 ms. Prints the pass's step count and wall time, each step's client-side time, the server
time of every command the pass sent (SLOWLOG with a threshold of 0, by command), the PING
latencies, and checks that exactly the stranded jobs were put back.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import redis
from benchmarks.admin_stall import Pinger, fill, pct
from benchmarks.servers import RedisServer
from conveyor.storage.redis.storage import RedisStorage, open_redis

QUEUE = "default"


def run(jobs: int, stranded: int) -> None:
    """Fill, strand, repair; print the figures."""
    server = RedisServer()
    raw = redis.Redis(port=server.port, decode_responses=True)
    store = open_redis(f"{server.url}?prefix=strand")
    assert isinstance(store, RedisStorage)
    pinger = Pinger(server.port)
    try:
        fill(store, jobs)
        pending = store.keys.queue(QUEUE).pending
        length = raw.llen(pending)
        victims = [str(raw.lindex(pending, (length - 1) * k // max(stranded - 1, 1)))
                   for k in range(stranded)]  # spread over the list, both ends included
        for job_id in victims:
            raw.lrem(pending, 0, job_id)
        store.repair.grace = 0.0
        pinger.start()
        time.sleep(0.5)
        raw.config_set("slowlog-max-len", 1_000_000)
        raw.config_set("slowlog-log-slower-than", 0)
        raw.slowlog_reset()
        steps: list[float] = []
        put_back = 0
        start = time.time()
        store.repair.start(QUEUE)
        while store.repair.running(QUEUE):
            t0 = time.perf_counter()
            put_back += store.repair.step(QUEUE)
            steps.append((time.perf_counter() - t0) * 1000)
        pinger.phases.append(("repair pass", start, time.time()))
        wall = time.time() - start
        raw.config_set("slowlog-log-slower-than", 10_000)
        by_command: dict[str, list[float]] = defaultdict(list)
        for entry in raw.slowlog_get(1_000_000):
            command = entry["command"]
            words = (command.decode() if isinstance(command, bytes) else command).split()
            if words and words[0] in ("LRANGE", "HSCAN", "EVALSHA", "EVAL", "TIME"):
                by_command[words[0]].append(entry["duration"] / 1000)
        pings = pinger.stop()["repair pass"] or [0.0]
        print(f"redis {server.version()}, {jobs} pending jobs, {stranded} stranded: "
              f"{len(steps)} steps in {wall:.2f} s, {put_back} put back, "
              f"list now {raw.llen(pending)} entries")
        print(f"step (client side, incl. round trips): p50 {pct(steps, 50):.2f} ms, "
              f"p99 {pct(steps, 99):.2f} ms, max {max(steps):.2f} ms")
        for name, ms in sorted(by_command.items()):
            print(f"{name:8} x{len(ms):5}: server time p50 {pct(ms, 50):.3f} ms, "
                  f"p99 {pct(ms, 99):.3f} ms, max {max(ms):.3f} ms")
        print(f"PING during the pass: p50 {pct(pings, 50):.2f} ms, p99 {pct(pings, 99):.2f} ms, "
              f"max {max(pings):.2f} ms ({len(pings)} pings)")
        assert put_back == stranded and raw.llen(pending) == jobs
    finally:
        store.close()
        server.stop()


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--stranded", type=int, default=3)
    args = parser.parse_args()
    run(args.jobs, args.stranded)


if __name__ == "__main__":
    main()
