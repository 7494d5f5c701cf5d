"""What the worker's reserve buys (worker/reserve.py): one worker draining no-op jobs with the
reserve off (``--reserve 0``: leases only for free slots) and on (the default), on each store.

    python -m benchmarks.reserve_probe --rounds 3

A private PostgreSQL and Redis (tests/support), SQLite in a temp dir. Per round, store and
setting: a fresh schema / key prefix / file, ``--jobs`` no-op jobs enqueued before one worker
(``conveyor worker --processes 1 -c 10``) starts; the rate is taken between the first 100 jobs
finished and the last. The settings alternate within each round, so both share the machine's
moods. Prints each round, then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import uuid

from tests.support.postgres_server import PostgresServer

from benchmarks.pg_probe import drain, fresh
from benchmarks.servers import RedisServer

SETTINGS = {"off": ("--reserve", "0"), "on": ()}
if os.environ.get("PROBE_SETTINGS"):  # e.g. "40,80,160": limits to compare
    SETTINGS = {n: ("--reserve", n) for n in os.environ["PROBE_SETTINGS"].split(",")}


def main() -> None:
    """Run the rounds and print the medians."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slots", type=int, default=10)
    parser.add_argument("--stores", default="postgres,redis,sqlite")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    stores = args.stores.split(",")
    rates: dict[tuple[str, str], list[float]] = {}
    with PostgresServer() as pg, tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer()
        try:
            urls = {
                "postgres": lambda: fresh(pg.url),
                "redis": lambda: f"{redis.url}?prefix=r{uuid.uuid4().hex[:8]}",
                "sqlite": lambda: f"sqlite:///{os.path.join(tmp, uuid.uuid4().hex[:8])}.db",
            }
            for round_no in range(args.rounds):
                for store in stores:
                    order = list(SETTINGS)[::1 if round_no % 2 == 0 else -1]
                    for setting in order:
                        rate = drain(urls[store](), args.jobs, args.slots, SETTINGS[setting])
                        rates.setdefault((store, setting), []).append(rate)
                        print(f"round {round_no + 1} {store:8} reserve {setting:>4}: "
                              f"{rate:>8,.0f} jobs/s", flush=True)
        finally:
            redis.stop()
    print(f"drain of {args.jobs:,} no-op jobs, 1 process x {args.slots} slots "
          f"(median of {args.rounds}):")
    for store in stores:
        med = {name: statistics.median(rates[(store, name)]) for name in SETTINGS}
        first = next(iter(med.values()))
        print(f"  {store:8}  " + "   ".join(
            f"reserve {name} {rate:>8,.0f}/s (x{rate / first:.2f})" for name, rate in med.items()))


if __name__ == "__main__":
    main()
