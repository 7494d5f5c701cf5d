"""Server CPU per job: how many jobs one Redis core (or one PostgreSQL) carries, conveyor
beside a raw queue on the same server in the same run (issue 53; a benchmark, not a test).

    python -m benchmarks.server_cpu [--jobs 5000] [--bulk 20000] [--rounds 3]
        [--backends redis,cluster,postgres] [--cases ...] [--before OTHER/src] [--smoke]

Starts its own servers (``servers.py``). Every case runs in a fresh interpreter against the
same server, the cases take turns round by round (reversed every other round), and the
medians are printed. A case measures, around its calls only (set-up and warm-up left out):

* the server's CPU seconds: ``INFO cpu`` (``used_cpu_user`` + ``used_cpu_sys``) of the
  Redis server, summed over every master of the Cluster; for PostgreSQL the CPU of the
  postmaster's process tree (its backends and background processes, ``/proc``, in ticks of
  10 ms: use thousands of jobs);
* Redis ``INFO commandstats`` (reset first): calls and µs per call of every command, a
  script's time including its inner commands (which are listed too);
* the client's CPU (``time.process_time``; for ``drain`` the worker process's) and wall rate.

Cases (``server_cpu_cases.py``): ``push`` alternates, in blocks of 250 calls in one process,
``raw_push`` (``LPUSH`` one by one; PostgreSQL: ``INSERT``), ``raw_script`` (a one-line
``EVALSHA``: ``HSET`` + ``LPUSH``) and conveyor's ``enqueue``; ``apush`` alternates a
redis.asyncio ``LPUSH`` (``raw_apush``) and ``aenqueue``; ``enqueue_many`` stores
``--bulk`` jobs in one call; ``raw_pop`` pops ``--jobs`` preloaded messages one by one
(``BRPOP``; PostgreSQL: ``DELETE … SKIP LOCKED … RETURNING``); ``drain`` is the lease and
ack of ``--jobs`` preloaded no-op jobs by one ``conveyor worker`` (1 process × 8 slots, as
``worker_cpu.py`` starts it). "× raw" is a variant's server CPU over the raw push measured
beside it in the same process (median of the rounds' ratios); for ``drain`` over
``raw_pop``'s. ``--before SRC`` runs conveyor's variants again with another checkout's
``src`` (named ``… (before)``, each beside a raw push of its own). ``--smoke``: a few hundred
jobs, one round, Redis only unless ``--backends`` says otherwise; seconds, no thresholds.

CPU per job is the robust figure on a busy machine, and a ratio measured in one process the
most robust of all; rates and wall times are not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from benchmarks.server_cpu_cases import ROOT, Server, child

CASES = ("push", "apush", "enqueue_many", "raw_pop", "drain")
ROWS = ("raw_push", "raw_script", "enqueue", "raw_apush", "aenqueue", "enqueue_many",
        "raw_pop", "drain")


class Backend:
    """A private server for one backend, and the URL each case gets."""

    def __init__(self, name: str) -> None:
        from benchmarks.servers import PostgresBench, RedisCluster, RedisServer

        self.name = name
        self.server: Any = {"redis": RedisServer, "cluster": RedisCluster,
                            "postgres": PostgresBench}[name]()
        self.pid = self.server.server.process.pid if name == "postgres" else 0
        self.count = 0

    def url(self) -> str:
        """A clean store for a case: Redis flushed, a new PostgreSQL schema."""
        self.count += 1
        if self.name == "postgres":
            return f"{self.server.url}?schema=cpu{self.count}"
        for node in Server(self.name, self.server.url, 0).nodes:
            node.flushall()
        return str(self.server.url)

    def stop(self) -> None:
        """Stop the server."""
        self.server.stop()


def run_case(backend: Backend, case: str, n: int, src: str | None) -> dict[str, Any]:
    """Run one case in a fresh interpreter (with ``src`` first on its path when given)."""
    return run_child("benchmarks.server_cpu", [case, backend.name, backend.url(), str(n),
                                               str(backend.pid), "" if src else "raw"],
                     src, f"{case} on {backend.name}")


def run_child(module: str, child_args: list[str], src: str | None,
              what: str) -> dict[str, Any]:
    """``python -m module --child *child_args`` in a fresh interpreter (``src`` first on its
    path when given); returns the JSON of its ``RESULT`` line (a probe's own run)."""
    path = [p for p in (src, ROOT, os.environ.get("PYTHONPATH")) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    out = subprocess.run([sys.executable, "-m", module, "--child", *child_args],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            return result
    raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")


def report(name: str, runs: dict[str, list[dict[str, Any]]]) -> str:
    """The table of one backend: medians over the rounds."""
    def med(label: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[label])

    lines = [f"\n### {name}\n",
             "| case | jobs | server CPU µs/job | × raw | one core carries /s "
             "| client CPU µs/job | jobs/s | server commands/job |",
             "|---|---|---|---|---|---|---|---|"]
    for label, rounds in runs.items():
        ratio = ""
        if all(r.get("ratio") is not None for r in rounds):
            ratio = f"{med(label, 'ratio'):.2f}×"
        elif label.startswith("drain") and "raw_pop" in runs and med("raw_pop", "server_us"):
            ratio = f"{med(label, 'server_us') / med('raw_pop', 'server_us'):.2f}×"
        first, cpu = rounds[0], med(label, "server_us")
        calls = sum(c for c, _ in first["commands"].values()) / first["n"]
        per = f"{calls:.2f}" if first["commands"] else "—"  # Redis only
        carries = f"{1e6 / cpu:,.0f}" if cpu > 0 else "—"  # below the clock's tick
        lines.append(f"| {label} | {first['n']:,} | {cpu:.1f} | {ratio} | {carries} "
                     f"| {med(label, 'client_us'):.1f} | {med(label, 'rate'):,.0f} "
                     f"| {per} |")
    lines.append("\nRedis commands (first round): calls per job × µs per call (a script's "
                 "time includes its inner commands, which are listed too)\n")
    for label, rounds in runs.items():
        stats, n = rounds[0]["commands"], rounds[0]["n"]
        if stats:
            top = sorted(stats.items(), key=lambda kv: -kv[1][1])[:6]
            lines.append(f"- {label}: " + ", ".join(
                f"{cmd} {calls / n:.2f}×{us / max(calls, 1):.1f}" for cmd, (calls, us) in top))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the cases on each backend and print one table per backend."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.server_cpu")
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--bulk", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default="")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--before", default="", help="another checkout's src, run beside this one")
    p.add_argument("--smoke", action="store_true", help="a few hundred jobs, one round")
    p.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    if args.smoke:
        args.jobs, args.bulk, args.rounds = 300, 500, 1
    backends = (args.backends or ("redis" if args.smoke else "redis,cluster,postgres")).split(",")
    cases = [c for c in args.cases.split(",") if c]
    unknown = set(cases) - set(CASES) | set(backends) - {"redis", "cluster", "postgres"}
    if unknown:
        p.error(f"unknown case or backend: {', '.join(sorted(unknown))}")
    plan: list[tuple[str, str | None]] = [(c, None) for c in cases]
    if args.before:
        plan += [(c, args.before) for c in cases if c != "raw_pop"]
    print(f"server CPU per job: {args.jobs:,} jobs one by one, enqueue_many of {args.bulk:,}, "
          f"{args.rounds} round(s), medians", flush=True)
    for name in backends:
        backend = Backend(name)
        runs: dict[str, list[dict[str, Any]]] = {}
        try:
            for rnd in range(args.rounds):
                for case, src in plan if rnd % 2 == 0 else plan[::-1]:
                    n = args.bulk if case == "enqueue_many" else args.jobs
                    for row, got in run_case(backend, case, n, src).items():
                        label = row + (" (before)" if src else "")
                        runs.setdefault(label, []).append(got)
                        print(f"  {name} round {rnd + 1} {label:<22} server "
                              f"{got['server_us']:7.1f} µs/job  client {got['client_us']:7.1f}"
                              f" µs/job  {got['rate']:9,.0f} jobs/s", file=sys.stderr,
                              flush=True)
        finally:
            backend.stop()
        print(report(name, {label: runs[label] for label in sorted(
            runs, key=lambda k: (ROWS.index(k.split(" (")[0]), k))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
