"""Issue 54's fairness and priority-inversion figures, at the storage (not a test):

    python -m benchmarks.fairness_probe [--stores sqlite,redis,postgres] [--big 100000]

Key A enqueues ``--big`` jobs, then keys B-K ``--small`` (100) each; one worker of 8 slots
drains the queue: ``dequeue`` of its free slots, each job "runs" for ``--run-ms`` (a sleep
shared by the 8 slots, as a worker's threads would), then its ack. Printed per store, with
``fair_by`` (the key) and without (arrival order: B-K wait for A):

* each small key's p50/p99 time to start (from its enqueue), and A's;
* Jain's fairness index over the keys' starts while every key still had jobs waiting
  (1.0: equal shares; the issue's target is >= 0.95);
* priority inversion: a priority-100 job enqueued behind ``--big`` priority-0 jobs, its time
  to start.

One private server per store (``benchmarks/servers.py``). The machine's load shows in the
times; the order (the index, who starts when relative to whom) does not depend on it. Run it
quiet for figures to quote.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections import defaultdict
from typing import Any

from conveyor.core.ids import new_id
from conveyor.core.job import Ack, FlowControl, JobSpec, Outcome
from conveyor.storage import open_storage

SLOTS = 8
KEYS = "BCDEFGHIJK"


def _specs(key: str, n: int, fair: bool, priority: int = 0) -> list[JobSpec]:
    flow = FlowControl(fair_key=key if fair else None, priority=priority)
    has = flow.in_lineup
    return [JobSpec(id=new_id(), name="bench.noop", queue="fair", payload='{"a":[]}',
                    flow=flow if has else None) for _ in range(n)]


def _drain(store: Any, owner: dict[str, str], enqueued: dict[str, float], run_s: float,
           stop_when: set[str] | None = None) -> tuple[dict[str, list[float]], list[str]]:
    """Run the queue dry (or until every id of ``stop_when`` started): start delays per key
    and the keys in start order."""
    delays: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    left = set(stop_when or ())
    while True:
        jobs = store.dequeue(["fair"], "probe", SLOTS, 60.0, SLOTS)
        if not jobs:
            return delays, order
        now = time.time()
        for job in jobs:
            key = owner.get(job.id, "?")
            delays[key].append(now - enqueued[job.id])
            order.append(key)
            left.discard(job.id)
        time.sleep(run_s)
        store.ack([Ack(job.id, job.token, Outcome.SUCCEEDED) for job in jobs])
        if stop_when is not None and not left:
            return delays, order


def _jain(order: list[str], keys: set[str]) -> float:
    """Jain's index of the keys' starts up to the first key to run dry."""
    counts: dict[str, int] = defaultdict(int)
    totals = {k: order.count(k) for k in keys}
    for key in order:
        counts[key] += 1
        if counts[key] == totals[key]:  # this key ran dry: the backlogged window ends
            break
    shares = [counts[k] for k in keys]
    return sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares))


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run(url: str, big: int, small: int, run_s: float, fair: bool) -> dict[str, Any]:
    """One run of the fairness case on a fresh store."""
    store = open_storage(url)
    owner: dict[str, str] = {}
    enqueued: dict[str, float] = {}
    for key, n in [("A", big), *((k, small) for k in KEYS)]:
        for chunk in range(0, n, 5000):
            specs = _specs(key, min(5000, n - chunk), fair)
            store.enqueue(specs)
            at = time.time()
            for spec in specs:
                owner[spec.id], enqueued[spec.id] = key, at
    smalls = {i for i, k in owner.items() if k != "A"}
    delays, order = _drain(store, owner, enqueued, run_s, stop_when=smalls)
    store.close()
    small_delays = [d for k in KEYS for d in delays[k]]
    return {"fair_by": fair, "small_p50_s": _pct(small_delays, 0.5),
            "small_p99_s": _pct(small_delays, 0.99), "A_p50_s": _pct(delays["A"], 0.5),
            "jain": round(_jain(order, {"A", *KEYS}), 3)}


def inversion(url: str, big: int) -> float:
    """Seconds until a priority-100 job enqueued behind ``big`` plain jobs starts."""
    store = open_storage(url)
    for chunk in range(0, big, 5000):
        store.enqueue(_specs("A", min(5000, big - chunk), False))
    [urgent] = _specs("Z", 1, False, priority=100)
    at = time.time()
    store.enqueue([urgent])
    started = None
    while started is None:
        jobs = store.dequeue(["fair"], "probe", SLOTS, 60.0, SLOTS)
        if any(j.id == urgent.id for j in jobs):
            started = time.time() - at
        store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs])
    store.close()
    return started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite")
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--run-ms", type=float, default=1.0)
    args = parser.parse_args()
    from benchmarks.servers import PostgresBench, RedisServer
    for name in args.stores.split(","):
        server: Any = None
        with tempfile.TemporaryDirectory() as tmp:
            for fair in (True, False):
                if name == "redis":
                    server = server or RedisServer()
                    url = f"{server.url}?prefix=f{uuid.uuid4().hex[:8]}"
                elif name == "postgres":
                    server = server or PostgresBench()
                    url = f"{server.url}?schema=f{uuid.uuid4().hex[:8]}"
                else:
                    url = f"sqlite:///{tmp}/{int(fair)}.db"
                print(name, run(url, args.big, args.small, args.run_ms / 1000, fair), flush=True)
            url = (f"sqlite:///{tmp}/inv.db" if name == "sqlite" else
                   f"{server.url}?prefix=i{uuid.uuid4().hex[:8]}" if name == "redis" else
                   f"{server.url}?schema=i{uuid.uuid4().hex[:8]}")
            print(name, {"priority_inversion_s": round(inversion(url, args.big), 4)},
                  flush=True)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
