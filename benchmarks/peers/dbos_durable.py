"""DBOS beside conveyor's durable jobs (``benchmarks/durable_probe.py``): run with the
``dbos`` venv's python and one JSON argument, prints one ``RESULT {json}`` line.

Cases, on DBOS's system database (SQLite or PostgreSQL, ``url``):

* ``steps``: ``jobs`` workflows of ``steps`` no-op steps each, enqueued on a queue of
  ``concurrency`` workers, timed from the first enqueue to the last result;
* ``sleep``: ``jobs`` workflows that each ``DBOS.sleep`` until their own wake time (spread
  over ``spread`` seconds starting ``sleep`` seconds out) and return how late they woke; on
  the queue (``queued``: its ``concurrency`` slots) or each started at once
  (``start_workflow``: a thread each). The process's RSS and CPU time are reported.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from typing import Any

from dbos import DBOS, DBOSConfig


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(config: dict[str, Any]) -> dict[str, Any]:
    DBOS(config=DBOSConfig(name="bench", system_database_url=config["url"],
                           log_level="WARNING"))

    @DBOS.step()
    def noop() -> None:
        return None

    @DBOS.workflow()
    def steps(n: int) -> int:
        for _ in range(n):
            noop()
        return n

    @DBOS.workflow()
    def sleeper(wake_at: float) -> float:
        DBOS.sleep(max(0.0, wake_at - time.time()))
        return time.time() - wake_at

    DBOS.launch()
    queue = DBOS.register_queue("bench", worker_concurrency=int(config["concurrency"]),
                                polling_interval_sec=float(config.get("poll", 0.05)))
    jobs = int(config["jobs"])
    cpu0, started = _cpu(), time.perf_counter()
    if config["case"] == "steps":
        handles = [queue.enqueue(steps, int(config["steps"])) for _ in range(jobs)]
        for handle in handles:
            handle.get_result()
        elapsed = time.perf_counter() - started
        out = {"jobs_per_s": jobs / elapsed, "steps_per_s": jobs * int(config["steps"]) / elapsed,
               "seconds": elapsed}
    else:
        first = time.time() + float(config["sleep"])
        spread = float(config["spread"])
        wakes = [first + spread * i / max(jobs - 1, 1) for i in range(jobs)]
        start = queue.enqueue if config.get("mode") == "queued" else (
            lambda fn, *a: DBOS.start_workflow(fn, *a))
        handles = [start(sleeper, w) for w in wakes]
        asleep_rss = _rss_mb()
        late = sorted(float(h.get_result()) for h in handles)
        elapsed = time.perf_counter() - started
        out = {"lateness_p50": statistics.median(late),
               "lateness_p99": late[int(0.99 * (len(late) - 1))], "seconds": elapsed,
               "rss_mb_asleep": asleep_rss}
    out.update(cpu_s=_cpu() - cpu0, rss_mb=_rss_mb())
    DBOS.destroy()
    return out


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # DBOS's background threads must not hold the process
