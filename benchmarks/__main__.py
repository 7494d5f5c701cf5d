"""``python -m benchmarks [--quick] [--rounds N] [--peers a,b] [--only w1_drain_p1,...]``.

Starts its own redis-server and Redis Cluster, runs every (workload, peer) pair in rounds,
writes ``benchmarks/results/<stamp>.json`` and ``.md`` after every run, and the chart
``docs/benchmarks.svg``. ``--report FILE`` re-renders the markdown from a results file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

from benchmarks import report
from benchmarks.servers import RedisCluster, RedisServer
from benchmarks.suite import HERE, PEERS, QUICK_PEERS, Runner, calibrate_cpu, workloads

RESULTS = os.path.join(HERE, "results")
DOCS = os.path.join(os.path.dirname(HERE), "docs")


def machine(redis_version: str) -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem),
            "kernel": platform.platform(), "python": platform.python_version(),
            "redis": redis_version}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks")
    p.add_argument("--quick", action="store_true", help="1 round, fewer jobs, fewer peers")
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    p.add_argument("--peers", default="", help="comma-separated peer labels (substring match)")
    p.add_argument("--only", default="", help="comma-separated workload keys")
    p.add_argument("--report", default="", help="re-render the markdown of a results JSON")
    p.add_argument("--docs", action="store_true",
                   help="write docs/benchmarks.md, its chart and the README table (the default "
                        "for a full run of every peer and workload)")
    return p.parse_args(argv)


def save(data: dict[str, Any], stem: str) -> None:
    """Write JSON, markdown and the chart (after every run, so a cut run keeps its numbers)."""
    with open(stem + ".json", "w") as f:
        json.dump(data, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(report.markdown(data))
    with open(stem + ".svg", "w") as f:
        f.write(report.svg_chart(data))


def publish(data: dict[str, Any], results_file: str) -> None:
    """docs/benchmarks.md, docs/benchmarks.svg and the README's headline table."""
    rel = os.path.relpath(results_file, os.path.dirname(HERE))
    analysis_file = os.path.join(HERE, "analysis.md")
    analysis = ""
    if os.path.exists(analysis_file):
        with open(analysis_file) as f:
            analysis = f.read()
    with open(os.path.join(DOCS, "benchmarks.md"), "w") as f:
        f.write(report.docs_page(data, rel, analysis))
    with open(os.path.join(DOCS, "benchmarks.svg"), "w") as f:
        f.write(report.svg_chart(data))
    readme = os.path.join(os.path.dirname(HERE), "README.md")
    with open(readme) as f:
        text = f.read()
    with open(readme, "w") as f:
        f.write(report.replace_block(text, report.readme_block(data)))
    print("[bench] wrote docs/benchmarks.md, docs/benchmarks.svg and the README table")


def main(argv: list[str] | None = None) -> int:
    """Run the suite."""
    args = parse(argv)
    if args.report:
        with open(args.report) as f:
            saved: dict[str, Any] = json.load(f)
        if args.docs:
            publish(saved, args.report)
        else:
            print(report.markdown(saved))
        return 0
    rounds = args.rounds or (1 if args.quick else 3)
    peers = [p for p in PEERS if (not args.quick or args.peers or p.label in QUICK_PEERS)
             and (not args.peers or any(s in p.label for s in args.peers.split(",")))]
    wls = [w for w in workloads(args.quick) if not args.only or w.key in args.only.split(",")]
    os.makedirs(RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    stem = os.path.join(RESULTS, stamp + ("-quick" if args.quick else ""))
    log_dir = os.path.join(RESULTS, "tmp", stamp)
    os.makedirs(log_dir, exist_ok=True)
    server, cluster = RedisServer(), RedisCluster()
    started = time.monotonic()
    try:
        runner = Runner(server.url, cluster.url, calibrate_cpu(), log_dir)
        data: dict[str, Any] = {
            "started": stamp, "mode": "quick" if args.quick else "full", "rounds": rounds,
            "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": machine(server.version()), "versions": {},
            "settings": {p.label: p.settings for p in peers},
            "cpu_iters": runner.cpu_iters, "cpu_seconds": runner.cpu_seconds,
            "workloads": [{"key": w.key, "title": w.title, "n": w.n, "processes": w.processes,
                           "concurrency": w.concurrency} for w in wls],
            "results": {w.key: {} for w in wls},
        }
        for rnd in range(rounds):
            for w in wls:
                if w.once and rnd > 0:
                    continue  # byte counts and the huge batch: one measurement is enough
                for peer in peers:
                    if w.only and peer.label not in w.only:
                        continue
                    res = runner.run(peer, w)
                    data["versions"].setdefault(res.get("peer", peer.label),
                                                res.get("version", "?"))
                    data["results"][w.key].setdefault(peer.label, []).append(res)
                    data["elapsed_min"] = (time.monotonic() - started) / 60
                    print(f"[bench] round {rnd + 1}/{rounds} {w.key:16} {peer.label:22} "
                          + json.dumps({k: v for k, v in res.items()
                                        if k not in ("config", "peer", "version")})[:200],
                          flush=True)
                    save(data, stem)
    finally:
        cluster.stop()
        server.stop()
    print(f"[bench] results: {stem}.json / .md / .svg")
    if args.docs or (not args.quick and not args.peers and not args.only):
        publish(data, stem + ".json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
