"""``python -m benchmarks [--quick] [--rounds N] [--peers a,b] [--only w1_drain_p1,...|io|pg]``.

``--only io`` runs the I/O workloads (W0a-c, W3 async) and the runs their targets compare
against, with only the peers each needs (``suite.IO_GROUP``), and writes ``<stamp>-io.json``.
``--only pg`` runs W0d (one PostgreSQL write) and W1-W4 + storage for conveyor on PostgreSQL,
Redis and SQLite beside procrastinate and PgQueuer (``suite.PG_GROUP``): ``<stamp>-pg.json``.

Starts its own redis-server and Redis Cluster (and PostgreSQL when a run needs it), runs
every (workload, peer) pair in rounds, writes ``benchmarks/results/<stamp>.json`` and ``.md``
after every run, and the chart ``docs/benchmarks.svg``. ``--report FILE`` re-renders the
markdown from a results file.
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
from benchmarks.servers import KafkaBench, PostgresBench, RabbitBench, RedisCluster, RedisServer
from benchmarks.suite import (
    AMQP_GROUP,
    HERE,
    IO_GROUP,
    KAFKA_GROUP,
    PEERS,
    PG_GROUP,
    PG_PEERS,
    QUICK_PEERS,
    WORKFLOW_GROUP,
    PeerSpec,
    Runner,
    Workload,
    calibrate_cpu,
    workloads,
)

RESULTS = os.path.join(HERE, "results")
DOCS = os.path.join(os.path.dirname(HERE), "docs")


def machine(redis_version: str, postgres_version: str = "") -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    # the load before the run's own processes start: what else the machine was doing
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem),
            "load_before": round(os.getloadavg()[0], 2),
            "kernel": platform.platform(), "python": platform.python_version(),
            "redis": redis_version, **({"postgres": postgres_version} if postgres_version else {})}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks")
    p.add_argument("--quick", action="store_true", help="1 round, fewer jobs, fewer peers")
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    p.add_argument("--peers", default="", help="comma-separated peer labels (substring match)")
    p.add_argument("--only", default="",
                   help="comma-separated workload keys, 'io' for the I/O workloads, 'pg' "
                        "for the PostgreSQL comparison, 'amqp' for delivery through RabbitMQ, or "
                        "'kafka' for delivery through Kafka (Tansu), or 'workflows' for the "
                        "fan-out with a callback beside Celery's chord")
    p.add_argument("--report", default="", help="re-render the markdown of a results JSON")
    p.add_argument("--docs", action="store_true",
                   help="write docs/benchmarks.md, its chart and the README table (the default "
                        "for a full run of every peer and workload; with --only pg: the page's "
                        "PostgreSQL section and the table's PostgreSQL rows)")
    return p.parse_args(argv)


def save(data: dict[str, Any], stem: str) -> None:
    """Write JSON, markdown and the chart (after every run, so a cut run keeps its numbers)."""
    with open(stem + ".json", "w") as f:
        json.dump(data, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(report.markdown(data))
    with open(stem + ".svg", "w") as f:
        f.write(report.svg_chart(data))


def latest(mode: str) -> tuple[dict[str, Any], str] | None:
    """The newest results file of a run mode (``full`` or ``io``) and its path."""
    for name in sorted(os.listdir(RESULTS), reverse=True):
        if name.endswith(".json"):
            with open(os.path.join(RESULTS, name)) as f:
                data: dict[str, Any] = json.load(f)
            if data.get("mode") == mode:
                return data, os.path.join(RESULTS, name)
    return None


def read_text(name: str) -> str:
    """A hand-written file of ``benchmarks/`` (empty when absent)."""
    path = os.path.join(HERE, name)
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


def pg_section(pg: tuple[dict[str, Any], str] | None) -> str:
    """The PostgreSQL section of docs/benchmarks.md from a ``--only pg`` run ("" if none)."""
    if pg is None:
        return ""
    rel = os.path.relpath(pg[1], os.path.dirname(HERE))
    return report.pg_page(pg[0], rel, read_text("analysis_pg.md"))


def publish_pg(data: dict[str, Any], results_file: str) -> None:
    """A ``--only pg`` run: only the PostgreSQL section of docs/benchmarks.md and the README
    table's PostgreSQL rows change (the rest of the page stays as the last publish left it)."""
    page = os.path.join(DOCS, "benchmarks.md")
    with open(page) as f:
        text = f.read()
    with open(page, "w") as f:
        f.write(report.replace_pg_section(text, pg_section((data, results_file))))
    full, io = latest("full"), latest("io")
    if full is not None:
        readme = os.path.join(os.path.dirname(HERE), "README.md")
        with open(readme) as f:
            text = f.read()
        newest_io = io[0] if io and io[0]["started"] > full[0]["started"] else full[0]
        with open(readme, "w") as f:
            f.write(report.replace_block(text, report.readme_block(full[0], newest_io, data)))
    print("[bench] wrote the PostgreSQL section of docs/benchmarks.md and the README table")


def publish(data: dict[str, Any], results_file: str) -> None:
    """docs/benchmarks.md, docs/benchmarks.svg and the README's headline table. The page
    leads with the I/O workloads: of this run, or of the newest ``--only io`` run when that
    is newer; an I/O run republishes over the newest full run. The PostgreSQL section and
    rows come from the newest ``--only pg`` run."""
    if data.get("mode") == "pg":
        publish_pg(data, results_file)
        return
    pg = latest("pg")
    io: tuple[dict[str, Any], str] | None = (data, results_file)
    if data.get("mode") == "io":
        full = latest("full")
        if full is None:
            raise SystemExit("no full run in benchmarks/results to publish the I/O run beside")
        data, results_file = full
    else:
        newer = latest("io")
        io = newer if newer and newer[0]["started"] > data["started"] else io
    assert io is not None
    root = os.path.dirname(HERE)
    rel = os.path.relpath(results_file, root)
    io_rel = os.path.relpath(io[1], root)
    with open(os.path.join(DOCS, "benchmarks.md"), "w") as f:
        f.write(report.docs_page(data, rel, read_text("analysis.md"),
                                 report.io_page(io[0], io_rel, read_text("analysis_io.md")),
                                 pg_section(pg)))
    with open(os.path.join(DOCS, "benchmarks.svg"), "w") as f:
        f.write(report.svg_chart(data))
    readme = os.path.join(os.path.dirname(HERE), "README.md")
    with open(readme) as f:
        text = f.read()
    with open(readme, "w") as f:
        f.write(report.replace_block(text, report.readme_block(data, io[0],
                                                                pg[0] if pg else None)))
    print("[bench] wrote docs/benchmarks.md, docs/benchmarks.svg and the README table")


def runs(w: Workload, peer: PeerSpec, group: dict[str, tuple[str, ...]] | None) -> bool:
    """Whether ``peer`` takes part in ``w`` (its own restriction, and that of ``--only io``
    or ``--only pg``: ``group``)."""
    if w.only and peer.label not in w.only:
        return False
    return not (group and group[w.key] and peer.label not in group[w.key])


def needs_postgres(w: Workload, peer: PeerSpec) -> bool:
    """Whether the pair runs on, or writes to, the suite's PostgreSQL."""
    return (peer.storage == "postgres" or peer.label in PG_PEERS
            or w.extra.get("body") == "pg")


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
    group = {"io": IO_GROUP, "pg": PG_GROUP, "amqp": AMQP_GROUP,
             "kafka": KAFKA_GROUP, "workflows": WORKFLOW_GROUP}.get(args.only)
    keys = list(group) if group else args.only.split(",")
    wls = [w for w in workloads(args.quick) if not args.only or w.key in keys]
    peers = [p for p in peers if any(runs(w, p, group) for w in wls)]
    os.makedirs(RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # "full" only for the whole suite: publishing looks for the newest full run
    mode = ("quick" if args.quick else args.only if group
            else "partial" if args.only or args.peers else "full")
    stem = os.path.join(RESULTS, stamp + ("-" + mode if mode != "full" else ""))
    log_dir = os.path.join(RESULTS, "tmp", stamp)
    os.makedirs(log_dir, exist_ok=True)
    server, cluster = RedisServer(), RedisCluster()
    pg = rabbit = kafka = None
    started = time.monotonic()
    try:
        if any(needs_postgres(w, p) and runs(w, p, group) for w in wls for p in peers):
            pg = PostgresBench()
        if any(p.broker == "rabbitmq" and runs(w, p, group) for w in wls for p in peers):
            rabbit = RabbitBench()
        if any(p.broker == "kafka" and runs(w, p, group) for w in wls for p in peers):
            kafka = KafkaBench()
        runner = Runner(server.url, cluster.url, calibrate_cpu(), log_dir,
                        pg.url if pg else "", rabbit.vhost if rabbit else None,
                        kafka.url if kafka else None)
        data: dict[str, Any] = {
            "started": stamp, "mode": mode, "rounds": rounds,
            "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": {**machine(server.version(), pg.version() if pg else ""),
                        **({"rabbitmq": rabbit.version()} if rabbit else {}),
                        **({"kafka": kafka.version()} if kafka else {})},
            "versions": {},
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
                    if not runs(w, peer, group):
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
        if rabbit is not None:
            rabbit.stop()
        if kafka is not None:
            kafka.stop()
        if pg is not None:
            pg.stop()
        cluster.stop()
        server.stop()
    print(f"[bench] results: {stem}.json / .md / .svg")
    if args.docs or (not args.quick and not args.peers and not args.only):
        publish(data, stem + ".json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
