"""What one script call costs the Redis server, by ``INFO commandstats`` (issue 53; a
benchmark, not a test):

    python -m benchmarks.script_cost [--calls 10000]

Starts its own ``redis-server`` (``servers.py``) and alternates, in blocks of 250 calls in one
process, the variants below; prints each one's µs per call as the server times it (a script's
time includes its inner commands). The figures decide between a lighter script and Redis 7
functions (``FUNCTION LOAD`` once, ``FCALL``) for the one-by-one enqueue:

* ``return 1`` by ``EVALSHA`` and by ``FCALL``: what a call costs before any work;
* ``HSET`` + ``LPUSH`` by each: a minimal two-command script;
* the floor of ``enqueue_one.lua``: its five commands (``TIME``, ``HSETNX``, ``HSET``,
  ``LPUSH``, ``LLEN``) and no other Lua work;
* ``enqueue_one.lua`` as this checkout ships it (``EVALSHA``), and the same body as a function
  whose spliced helpers are defined once, when the library is loaded (``FCALL``).

``commandstats`` times are wall-clock: on a loaded machine a preempted script counts its
wait, so compare variants of one run (they take turns), and run it quiet for figures to quote.
"""

from __future__ import annotations

import argparse
import itertools
import re
from collections.abc import Callable
from typing import Any

import redis
from benchmarks.servers import RedisServer
from conveyor.storage.redis.scripts import SCRIPTS

BLOCK = 250
STATIC = '{"n":"job","p":[["noop",1.0]],"q":"default","r":0}'
FLOOR = ("redis.call('TIME') "
         "if redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[4]) == 0 then return '0' end "
         "redis.call('HSET', KEYS[2], ARGV[2], 'x') redis.call('LPUSH', KEYS[3], ARGV[2]) "
         "redis.call('LLEN', KEYS[5]) return '1'")
TWO = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return redis.call('LPUSH', KEYS[2], ARGV[1])"


def as_library(name: str, source: str) -> str:
    """``source`` (an assembled script) as a Redis function library: its top-level
    ``local function`` definitions that read no per-call value (KEYS, ARGV) are defined once,
    at load; the rest becomes the function's body."""
    helpers = [m[0] for m in re.finditer(r"^local function \w+\(.*?\n^end\n", source, re.M | re.S)
               if "ARGV" not in m[0] and "KEYS" not in m[0]]
    body = source
    for helper in helpers:
        body = body.replace(helper, "")
    return (f"#!lua name={name}\n" + "".join(helpers)
            + f"redis.register_function('{name}', function(KEYS, ARGV)\n{body}\nend)\n")


def variants(r: redis.Redis) -> dict[str, Callable[[], Any]]:
    """Each variant as a call of one job's worth, on keys of its own."""
    one = SCRIPTS["enqueue_one"].source
    r.function_load("#!lua name=one\nredis.register_function('one', function() return 1 end)",
                    replace=True)
    r.function_load("#!lua name=two\nredis.register_function('two', function(KEYS, ARGV) "
                    + TWO + " end)", replace=True)
    r.function_load(as_library("eo", one), replace=True)
    sha = {text: r.script_load(text) for text in ("return 1", TWO, FLOOR, one)}
    ids = itertools.count()

    def keys(tag: str) -> list[str]:
        return [f"{{{tag}}}:{k}" for k in ("jobs", "state", "pending", "scheduled", "notify")]

    def job() -> list[str]:
        return ["", f"id{next(ids)}", "", STATIC, "job", ""]

    return {
        "EVALSHA return 1": lambda: r.evalsha(sha["return 1"], 0),
        "FCALL return 1": lambda: r.fcall("one", 0),
        "EVALSHA HSET + LPUSH": lambda: r.evalsha(sha[TWO], 2, "{a}:h", "{a}:l",
                                                  next(ids), STATIC),
        "FCALL HSET + LPUSH": lambda: r.fcall("two", 2, "{b}:h", "{b}:l", next(ids), STATIC),
        "EVALSHA five commands": lambda: r.evalsha(sha[FLOOR], 5, *keys("c"), *job()),
        "EVALSHA enqueue_one.lua": lambda: r.evalsha(sha[one], 5, *keys("d"), *job()),
        "FCALL enqueue_one.lua": lambda: r.fcall("eo", 5, *keys("e"), *job()),
    }


def measure(r: redis.Redis, calls: int) -> dict[str, float]:
    """µs per call of each variant, over ``calls`` calls each in blocks taking turns."""
    todo = variants(r)
    names = list(todo)
    total = {name: [0, 0.0] for name in names}
    for block in range(max(calls // BLOCK, 1)):
        for name in names[block % len(names):] + names[:block % len(names)]:
            r.config_resetstat()
            for _ in range(BLOCK):
                todo[name]()
            stats = r.info("commandstats")
            got = stats.get("cmdstat_evalsha") or stats["cmdstat_fcall"]
            total[name][0] += int(got["calls"])
            total[name][1] += float(got["usec"])
    return {name: us / n for name, (n, us) in total.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the variants on a private server and print µs per call."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.script_cost")
    p.add_argument("--calls", type=int, default=10000)
    args = p.parse_args(argv)
    server = RedisServer()
    try:
        r = redis.Redis(port=server.port, decode_responses=True)
        print(f"Redis {server.version()}: µs per call (INFO commandstats), "
              f"{args.calls:,} calls each")
        for name, us in measure(r, args.calls).items():
            print(f"| {name} | {us:.2f} |")
        r.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
