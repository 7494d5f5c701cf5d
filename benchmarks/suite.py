"""The suite: peers, workloads, virtual environments, and the interleaved rounds.

Each run is one subprocess: the peer's own venv python running ``peers/<adapter>.py`` with a
JSON config; it prints ``RESULT {json}``. Rounds interleave peers (A B C A B C) so that drift
on the machine hits everyone alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS_DIR = os.path.join(HERE, "peers")
VENVS = os.path.join(HERE, ".venvs")

# venv name -> pip requirements (peers whose redis-py pins conflict each get their own venv)
VENV_REQS: dict[str, list[str]] = {
    "celery": ["celery[redis]", "hiredis"],
    "rq": ["rq", "hiredis"],
    "dramatiq": ["dramatiq[redis,rabbitmq]", "hiredis"],  # pika for its RabbitMQ broker
    "arq": ["arq", "hiredis"],  # pins redis<6
    "saq": ["saq[redis]", "hiredis", "typing_extensions"],  # needs redis<8
    "huey": ["huey", "redis", "hiredis"],
    "taskiq": ["taskiq", "taskiq-redis", "hiredis"],  # taskiq-redis needs redis>=8
    # PostgreSQL engines (both support Python 3.11; run with procrastinate 3.10.0 and PgQueuer
    # 1.6.0); redis for the completion counter, psycopg for the W0d body
    "procrastinate": ["procrastinate", "psycopg[binary]", "redis", "hiredis"],
    "pgqueuer": ["pgqueuer", "asyncpg", "psycopg[binary]", "redis", "hiredis"],
    # durable execution beside conveyor's durable jobs (benchmarks/durable_probe.py)
    "dbos": ["dbos", "psycopg[binary]"],
}


@dataclass(frozen=True)
class PeerSpec:
    """One engine configuration: its adapter, venv, variant and concurrency model."""

    label: str
    adapter: str
    venv: str | None = None  # None: the suite's own python (conveyor, raw redis-py)
    variant: str = ""
    per_process: bool = True  # False: one job at a time per process (RQ, Celery prefork)
    storage: str = ""  # conveyor: sqlite | redis | cluster | postgres
    settings: str = ""
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the adapter and its workers
    max_jobs: int = 0  # cap on n for engines so slow that n jobs would not fit the run's time
    broker: str = ""  # "rabbitmq": jobs delivered by the suite's RabbitMQ node


PEERS = [
    PeerSpec("conveyor (redis)", "conveyor_peer", storage="redis",
             settings="conveyor worker -c C --processes P"),
    PeerSpec("conveyor (sqlite)", "conveyor_peer", storage="sqlite",
             settings="same, SQLite file in a temp dir"),
    PeerSpec("conveyor (cluster)", "conveyor_peer", storage="cluster",
             settings="same, local 3-master Redis Cluster"),
    PeerSpec("conveyor (postgres)", "conveyor_peer", storage="postgres",
             settings="same, the suite's PostgreSQL, ?schema=bench"),
    PeerSpec("redis-py LPUSH/BRPOP", "rawredis", variant="brpop",
             settings="hand-written: LPUSH, C threads x BRPOP"),
    PeerSpec("redis-py batch", "rawredis", variant="batch",
             settings="hand-written: pipelined LPUSH, RPOP 100 per round trip"),
    PeerSpec("celery prefork", "celery_peer", "celery", "prefork", per_process=False,
             settings="-P prefork -c P, prefetch x16, no gossip/mingle/heartbeat"),
    PeerSpec("celery threads", "celery_peer", "celery", "threads",
             settings="P x (-P threads -c C), prefetch x16"),
    PeerSpec("rq", "rq_peer", "rq", "default", per_process=False,
             settings="P x rq worker (fork per job), result_ttl=0; at most 2,000 jobs a run "
                      "(one fork per job runs ~50-100 jobs/s here)",
             max_jobs=2_000,
             # the forked work horse ends with os._exit: it must count completions at once
             env=(("BENCH_DONE_SYNC", "1"),)),
    PeerSpec("rq SimpleWorker", "rq_peer", "rq", "simple", per_process=False,
             settings="P x rq worker -w SimpleWorker, result_ttl=0"),
    PeerSpec("dramatiq", "dramatiq_peer", "dramatiq", settings="dramatiq -p P -t C"),
    PeerSpec("arq", "arq_peer", "arq", settings="P x arq, max_jobs=C, poll_delay=10 ms"),
    PeerSpec("saq", "saq_peer", "saq", settings="saq --workers P, concurrency=C"),
    PeerSpec("huey", "huey_peer", "huey", settings="P x huey_consumer -k thread -w C -n -C"),
    PeerSpec("taskiq", "taskiq_peer", "taskiq",
             settings="taskiq worker --workers P --max-async-tasks C (ListQueueBroker)"),
    PeerSpec("procrastinate", "procrastinate_peer", "procrastinate",
             settings="P x procrastinate worker --concurrency C, psycopg pool C+2, LISTEN/NOTIFY, "
                      "--delete-jobs successful (never where a run reads per-job status); "
                      "W4: batch_defer + list_queues polled (no group API)"),
    PeerSpec("pgqueuer", "pgqueuer_peer", "pgqueuer",
             settings="P x pgqueuer.run (what pgq run runs), asyncpg, batch_size C/2, "
                      "max_concurrent_tasks C, "
                      "install --durability balanced; W4: bulk enqueue + job_status polled "
                      "(no group API)"),
]
# On the suite's RabbitMQ (issue 20): conveyor with the store as the outbox beside Celery and
# Dramatiq on the same node, with their documented fast settings.
AMQP_CONVEYORS = ("conveyor (sqlite+rabbitmq)", "conveyor (redis+rabbitmq)",
                  "conveyor (postgres+rabbitmq)")
AMQP_PEERS = ("celery prefork (rabbitmq)", "celery threads (rabbitmq)", "dramatiq (rabbitmq)")
PEERS += [
    *(PeerSpec(label, "conveyor_peer", storage=label.split("(")[1].split("+")[0],
               broker="rabbitmq", settings="conveyor worker -c C --processes P --broker "
               "amqp://… (quorum queues, confirms, prefetch 2 x C)")
      for label in AMQP_CONVEYORS),
    PeerSpec("celery prefork (rabbitmq)", "celery_peer", "celery", "prefork", per_process=False,
             broker="rabbitmq", settings="-P prefork -c P, pyamqp, prefetch x16, no "
             "gossip/mingle/heartbeat, early ack; Redis result backend for the tracked task"),
    PeerSpec("celery threads (rabbitmq)", "celery_peer", "celery", "threads",
             broker="rabbitmq", settings="P x (-P threads -c C), pyamqp, prefetch x16"),
    PeerSpec("dramatiq (rabbitmq)", "dramatiq_peer", "dramatiq", broker="rabbitmq",
             settings="dramatiq -p P -t C, RabbitmqBroker (pika, confirm_delivery off: its "
             "default); Redis results backend for the tracked actor"),
]
# On the suite's Kafka-wire broker (issue 21; Tansu, not Apache Kafka).
KAFKA_CONVEYORS = ("conveyor (redis+kafka)", "conveyor (sqlite+kafka)",
                   "conveyor (postgres+kafka)")
PEERS += [PeerSpec(label, "conveyor_peer", storage=label.split("(")[1].split("+")[0],
                   broker="kafka", settings="conveyor worker -c C --processes P --broker "
                   "kafka://… (Tansu in memory, 4 partitions, acks=all)")
          for label in KAFKA_CONVEYORS]
RAW = "redis-py LPUSH/BRPOP"  # the raw queue every I/O workload is reported against
# Engines whose jobs are plain functions run the sync I/O bodies (W0a, W0c); the asyncio
# engines run the async one (W0b): a blocking body on their event loop would run one at a time.
SYNC_IO = ("conveyor (redis)", RAW, "huey", "dramatiq", "celery threads")
ASYNC_IO = ("conveyor (redis)", RAW, "arq", "saq", "taskiq")
PG_PEERS = ("procrastinate", "pgqueuer")  # the PostgreSQL engines #18's targets compare with
PG_CONVEYORS = ("conveyor (postgres)", "conveyor (redis)", "conveyor (sqlite)")
QUICK_PEERS = {"conveyor (redis)", "conveyor (sqlite)", "redis-py batch", "celery threads",
               "rq SimpleWorker", "dramatiq", "huey"}


@dataclass(frozen=True)
class Workload:
    """One measured scenario."""

    key: str
    title: str
    workload: str
    n: int
    processes: int = 1
    concurrency: int = 10
    extra: dict[str, Any] = field(default_factory=dict)
    only: tuple[str, ...] = ()  # restrict to these storages/peers (labels)
    once: bool = False  # measured in the first round only (sizes, not speeds)


IO_N = 5_000
IO_C = 8  # slots of the one worker process in every W0 workload


def io_workloads(quick: bool) -> list[Workload]:
    """W0: jobs whose body does real I/O, drained and live, 1 worker process x 8 slots, each
    against the raw queue with the same body; and W3 with an ``async def`` body."""
    n = IO_N // (5 if quick else 1)
    out = []
    for code, body, title, peers in (
            ("w0a", "redis", "one Redis round trip (sync)", SYNC_IO),
            ("w0b", "aredis", "one Redis round trip (asyncio)", ASYNC_IO),
            ("w0c", "sqlite", "one SQLite write", SYNC_IO)):
        live_peers = (*peers, "conveyor (cluster)") if code == "w0a" else peers
        out += [Workload(f"{code}_drain", f"W0{code[2]} drain: {title}", "drain", n, 1, IO_C,
                         {"body": body}, only=peers),
                Workload(f"{code}_live", f"W0{code[2]} live end to end: {title}", "live", n,
                         1, IO_C, {"body": body}, only=live_peers)]
    out.append(Workload("w3_async", "W3 async (20 ms asyncio.sleep, concurrency 50)", "io",
                        2_000 // (2 if quick else 1), 1, 50, {"sleep": 0.02, "body": "asleep"},
                        only=("conveyor (redis)", RAW)))
    return out


def pg_workloads(quick: bool) -> list[Workload]:
    """W0d: jobs of one PostgreSQL write, drained and live, 1 worker process x 8 slots, for
    conveyor on each backend, the raw queue and the PostgreSQL engines (async bodies there)."""
    n = IO_N // (5 if quick else 1)
    peers = (*PG_CONVEYORS, RAW, *PG_PEERS)
    return [Workload(f"w0d_{form}", f"W0d {title}: one PostgreSQL write", form, n, 1, IO_C,
                     {"body": "pg"}, only=peers)
            for form, title in (("drain", "drain"), ("live", "live end to end"))]


# ``--only pg``: W0d and W1-W4 + storage for conveyor on PostgreSQL beside the PostgreSQL
# engines and conveyor on Redis and SQLite (workload key -> peers; empty: the workload's own).
PG_GROUP: dict[str, tuple[str, ...]] = {
    **{w.key: () for w in pg_workloads(False)},
    **{key: (*PG_CONVEYORS, *PG_PEERS) for key in (
        "w1_enqueue_one", "w1_enqueue_bulk", "w1_drain_p1", "w1_live_p1", "w2_latency", "w3_io",
        "w4_batch", "storage")},
}


# ``--only io``: the W0 workloads, W3 async, and the runs their targets compare against, each
# with only the peers its targets need (workload key -> peers; empty: the workload's own).
IO_GROUP: dict[str, tuple[str, ...]] = {
    **{w.key: () for w in io_workloads(False)},
    "w1_enqueue_one": ("conveyor (redis)", "conveyor (cluster)", RAW),
    "w1_drain_p1": ("conveyor (redis)", RAW),
    "w1_live_p1": ("conveyor (redis)", RAW),
    "w2_latency": ("conveyor (redis)", "conveyor (sqlite)", RAW),
}


# ``--only amqp``: W1-W4 for conveyor delivered by RabbitMQ (store as outbox) beside Celery and
# Dramatiq on the same RabbitMQ node, and conveyor without a broker for scale.
AMQP_GROUP: dict[str, tuple[str, ...]] = {
    key: (*AMQP_CONVEYORS, *AMQP_PEERS, "conveyor (sqlite)", "conveyor (redis)")
    for key in ("w1_enqueue_one", "w1_drain_p1", "w1_drain_p2", "w1_live_p1", "w2_latency",
                "w3_io", "w4_batch")
}


# ``--only kafka``: conveyor delivered by Kafka (Tansu) beside conveyor delivered by RabbitMQ
# and conveyor on its stores alone.
KAFKA_GROUP: dict[str, tuple[str, ...]] = {
    key: (*KAFKA_CONVEYORS, "conveyor (redis+rabbitmq)", "conveyor (sqlite+rabbitmq)",
          "conveyor (redis)", "conveyor (sqlite)")
    for key in ("w1_drain_p1", "w1_drain_p2", "w1_live_p1", "w2_latency", "w4_batch")
}


# ``--only workflows``: W6, a fan-out with one callback, for conveyor on each store beside
# Celery's chord and Dramatiq's group with a completion callback, all on the suite's Redis.
WORKFLOW_GROUP: dict[str, tuple[str, ...]] = {
    key: ("conveyor (sqlite)", "conveyor (redis)", "conveyor (postgres)",
          "celery threads", "celery prefork", "dramatiq")
    for key in ("w6_fanout", "w7_chain")
}


def workloads(quick: bool) -> list[Workload]:
    """W0 (I/O bodies) first, then the W1-W5 scenarios and the storage-cost runs; ``quick``
    shrinks the job counts."""
    k = 5 if quick else 1
    conv = ("conveyor (redis)", "conveyor (sqlite)")
    return [
        *io_workloads(quick),
        *pg_workloads(quick),
        Workload("w1_enqueue_one", "W1 enqueue one by one", "enqueue_one", 10_000 // k),
        Workload("w1_enqueue_bulk", "W1 enqueue in bulk", "enqueue_bulk", 10_000 // k),
        Workload("w1_drain_p1", "W1 drain, 1 process", "drain", 10_000 // k, 1),
        Workload("w1_drain_p2", "W1 drain, 2 processes", "drain", 10_000 // k, 2),
        Workload("w1_live_p1", "W1 live end to end, 1 process", "live", 10_000 // k, 1),
        Workload("w1_live_p2", "W1 live end to end, 2 processes", "live", 10_000 // k, 2),
        Workload("w2_latency", "W2 idle latency (100/s)", "latency", 500 // (2 if quick else 1),
                 extra={"rate": 100}),
        Workload("w3_io", "W3 I/O-bound (20 ms sleep, concurrency 50)", "io",
                 2_000 // (2 if quick else 1), 1, 50, {"sleep": 0.02}),
        Workload("w4_batch", "W4 batch, engine reports complete", "batch", 5_000 // k),
        Workload("w5_cpu", "W5 CPU-bound (~20 ms, 2 processes)", "cpu",
                 200 // (2 if quick else 1), 2, 1),
        Workload("w6_fanout", "W6 fan-out of 5,000 + one callback (enqueue to callback done)",
                 "fanout", 5_000 // k),
        Workload("w7_chain", "W7 chain of 1,000 steps, each given the previous result",
                 "chain", 1_000 // k),
        Workload("storage", "Storage cost", "storage", 10_000 // k, once=True),
        Workload("overhead", "Batch tracking overhead (drain, 1 process)", "overhead",
                 10_000 // k, only=("conveyor (redis)",)),
        Workload("bigbatch", "1,000,000-job batch", "bigbatch",
                 100_000 if quick else 1_000_000, only=conv, once=True),
    ]


def ensure_venv(name: str, log: Any) -> str:
    """The venv's python, created and filled on first use, reused after."""
    path = os.path.join(VENVS, name)
    py = os.path.join(path, "bin", "python")
    stamp = os.path.join(path, ".bench-installed")
    wanted = " ".join(VENV_REQS[name])
    try:
        with open(stamp) as f:
            installed = f.read().strip()
    except FileNotFoundError:
        installed = None
    if installed != wanted:  # new, or its requirements changed: pip adds what is missing
        print(f"[bench] filling venv {name} ({wanted}) ...", file=log, flush=True)
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", path], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", *VENV_REQS[name]], check=True)
        with open(stamp, "w") as f:
            f.write(wanted)
    return py


def calibrate_cpu(target: float = 0.02) -> tuple[int, float]:
    """Iterations of the W5 body that take about ``target`` seconds here, and their time."""
    sys.path.insert(0, PEERS_DIR)
    from body import spin  # the peers dir is not a package

    iters = 50_000
    t0 = time.perf_counter()
    spin(iters)
    iters = int(iters * target / (time.perf_counter() - t0))
    best = min(_timed(spin, iters) for _ in range(5))
    return iters, best


def _timed(fn: Any, arg: int) -> float:
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


class Runner:
    """Runs one (peer, workload) pair in its own subprocess."""

    def __init__(self, redis_url: str, cluster_url: str, cpu: tuple[int, float],
                 log_dir: str, pg_url: str = "",
                 amqp_vhost: Callable[[str], str] | None = None,
                 kafka_url: Callable[[str], str] | None = None) -> None:
        self.redis_url = redis_url
        # A fresh virtual host on the suite's RabbitMQ node, by name -> its URL (None: no node
        # in this run). Each run gets its own: the engines declare queues of the same name
        # with different arguments, and nothing is left over from the run before.
        self.amqp_vhost = amqp_vhost
        self.kafka_url = kafka_url  # likewise topics and a group of its own per run
        self.runs = 0
        self.cluster_url = cluster_url
        self.pg_url = pg_url  # the suite's PostgreSQL (empty: no PostgreSQL in this run)
        self.cpu_iters, self.cpu_seconds = cpu
        self.log_dir = log_dir
        self.sqlite_dir = tempfile.mkdtemp(prefix="bench-sqlite-")
        self.body_dir = tempfile.mkdtemp(prefix="bench-body-")  # the sqlite body's files

    def python(self, peer: PeerSpec) -> str:
        return ensure_venv(peer.venv, sys.stderr) if peer.venv else sys.executable

    def config(self, peer: PeerSpec, w: Workload) -> dict[str, Any]:
        procs, conc = w.processes, w.concurrency
        if not peer.per_process:  # one job at a time per process: processes carry concurrency
            io = w.workload == "io" or "body" in w.extra
            procs, conc = (procs * conc if io else procs), 1
        n = min(w.n, peer.max_jobs) if peer.max_jobs and w.workload != "bigbatch" else w.n
        cfg: dict[str, Any] = {
            "workload": w.workload, "n": n, "processes": procs, "concurrency": conc,
            "redis_url": self.redis_url, "variant": peer.variant, "log_dir": self.log_dir,
            "sleep": 0.02, "rate": 100, "cpu_seconds": self.cpu_seconds, "timeout": 600,
        }
        cfg.update(w.extra)
        return cfg

    def env(self, peer: PeerSpec) -> dict[str, str]:
        env = dict(os.environ)
        env["BENCH_DONE_URL"] = self.redis_url
        env["BENCH_CPU_ITERS"] = str(self.cpu_iters)
        env["BENCH_SLEEP"] = "0.02"
        env["BENCH_SQLITE_DIR"] = self.body_dir
        if self.pg_url:
            env["BENCH_PG_URL"] = self.pg_url
            env["BENCH_PG_BODY_URL"] = self.pg_url.rsplit("/", 1)[0] + "/bench_body"
        # BENCH_SRC: measure another checkout's conveyor (e.g. before/after a change)
        extra = os.environ.get("BENCH_SRC")
        env["PYTHONPATH"] = PEERS_DIR + (os.pathsep + extra if extra else "")
        env.update(peer.env)
        if peer.broker == "kafka" and self.kafka_url is not None:
            self.runs += 1
            env["BENCH_CONVEYOR_BROKER"] = self.kafka_url(f"run{self.runs}")
        elif peer.broker and self.amqp_vhost is not None:
            self.runs += 1
            env["BENCH_AMQP_URL"] = env["BENCH_CONVEYOR_BROKER"] = self.amqp_vhost(
                f"run{self.runs}")
        if peer.storage:
            env["BENCH_CONVEYOR_URL"] = {
                "redis": self.redis_url,
                "sqlite": f"sqlite:///{self.sqlite_dir}/bench.db",
                "cluster": self.cluster_url,
                "postgres": self.pg_url + "?schema=bench",
            }[peer.storage]
        return env

    def run(self, peer: PeerSpec, w: Workload) -> dict[str, Any]:
        cfg = self.config(peer, w)
        script = os.path.join(PEERS_DIR, peer.adapter + ".py")
        t0 = time.monotonic()
        try:
            proc = subprocess.run([self.python(peer), script, json.dumps(cfg)], cwd=PEERS_DIR,
                                  env=self.env(peer), capture_output=True, text=True,
                                  timeout=900)
        except subprocess.TimeoutExpired:
            return {"error": "timed out after 900 s"}
        with open(os.path.join(self.log_dir, "adapters.log"), "a") as f:
            f.write(f"=== {peer.label} {w.key}\n{proc.stderr[-4000:]}\n")
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                out: dict[str, Any] = json.loads(line[7:])
                out["wall"] = time.monotonic() - t0
                out["config"] = {k: cfg[k] for k in ("n", "processes", "concurrency")}
                return out
        return {"error": f"no result (exit {proc.returncode}): {proc.stderr[-300:]}"}
