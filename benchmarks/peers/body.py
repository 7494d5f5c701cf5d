"""The one job body every engine runs, and the completion signal the driver waits for.

Stdlib + redis-py only: it is imported inside every peer's own virtual environment.
Configuration comes from environment variables the adapter sets before starting workers.

Completion counting must not be what is measured. A synchronous ``INCR`` per job costs one
Redis round trip (~130 µs on a small VM), which alone caps any engine near 4,000 jobs/s and
hides the differences between them. So each worker process counts completions in memory and a
daemon thread adds them to ``bench:done`` every 2 ms (one INCRBY), for every engine alike,
together with the wall-clock times of the first and last completion it covers: the driver
times runs by those, so the flush interval never shows in a result.
Engines that run each job in a process that ends with ``os._exit`` (RQ's forking worker) set
``BENCH_DONE_SYNC=1``: there the forked process cannot flush later, so it counts at once.

Each flush also reports the process's CPU time (``getrusage(RUSAGE_SELF)``, all threads) at its
first completion and now, with the jobs completed in between: the driver divides one by the
other for the engine's CPU per job. The flush itself costs the same in every engine.

The I/O bodies (W0): ``redis`` is one pipelined round trip of two commands (``INCR`` and
``EXPIRE`` on a key of its own) to the benchmark redis; ``aredis`` the same with
``redis.asyncio``; ``sqlite`` one ``INSERT`` and ``COMMIT`` into a SQLite file of the worker
process's own (WAL, ``synchronous=NORMAL``; one connection per process, writes serialised by
a lock as SQLite serialises them anyway); ``pg`` one ``INSERT`` and ``COMMIT`` into the table
``io`` of the suite's PostgreSQL database ``bench_body`` through psycopg 3 (``BENCH_PG_BODY_URL``):
one connection per thread in the sync body, and in the async one (``arun``, the asyncio engines)
a pool of ``psycopg.AsyncConnection`` per event loop with one connection per concurrent job.
The driver creates and empties the table before each run (``common.py``).
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import os
import resource
import sqlite3
import threading
import time
from typing import Any

import redis.asyncio as aredis

import redis

DONE_KEY = "bench:done"
LAT_KEY = "bench:lat"
SPAN_KEY = "bench:span"
CPU_KEY = "bench:cpu"
FLUSH_EVERY = 0.002
ASYNC_KINDS = ("aredis", "asleep")  # bodies only an asyncio engine can run

_client: Any = None
_pid = -1


_client_lock = threading.Lock()


def client() -> Any:
    """A redis-py client to the benchmark's own redis, one per process (re-made after fork).

    Made under a lock: job threads that race here on their first job would each make one,
    and the losers' clients, dropped while in use, close their sockets under them."""
    global _client, _pid
    if _pid != os.getpid():
        with _client_lock:
            if _pid != os.getpid():
                _client = redis.Redis.from_url(os.environ["BENCH_DONE_URL"])
                _pid = os.getpid()
    return _client


class _Counter:
    """Completions of this process not yet reported, with the wall-clock span they cover."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending = 0
        self.first = 0.0
        self.last = 0.0
        self.owner = -1  # pid whose flusher thread runs
        self.cpu_first = -1.0  # process CPU seconds at the first completion
        self.total = 0  # completions since (and including) the first

    def add(self) -> None:
        now = time.time()
        with self.lock:
            if not self.pending:
                self.first = now
            if self.cpu_first < 0:
                self.cpu_first = cpu_seconds()
            self.pending += 1
            self.total += 1
            self.last = now
            if self.owner == os.getpid():
                return
            self.owner = os.getpid()  # first completion in this process: start its flusher
        threading.Thread(target=self._loop, name="bench-done", daemon=True).start()

    def flush(self) -> None:
        with self.lock:
            n, first, last = self.pending, self.first, self.last
            self.pending = 0
            cpu = f"{self.cpu_first!r} {cpu_seconds()!r} {self.total}"
        if n:
            report(n, first, last, cpu)

    def _loop(self) -> None:
        while True:
            time.sleep(FLUSH_EVERY)
            try:
                self.flush()
            except Exception:  # the driver's redis is gone: the run is over
                return

    def after_fork(self) -> None:
        # The parent's thread does not exist here, and its lock may have been held at fork.
        self.lock = threading.Lock()
        self.pending = 0
        self.owner = -1
        self.cpu_first = -1.0
        self.total = 0
        global _client_lock
        _client_lock = threading.Lock()  # may have been held at fork


def cpu_seconds() -> float:
    """User + system CPU time of this process, all its threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def report(n: int, first: float, last: float, cpu: str = "") -> None:
    """Add ``n`` completions and the span they finished in (the driver times runs by it);
    ``cpu``: "CPU-at-first-completion CPU-now completions" of this process."""
    pipe = client().pipeline(transaction=False)
    pipe.incrby(DONE_KEY, n)
    pipe.rpush(SPAN_KEY, f"{first!r} {last!r}")
    if cpu:
        pipe.hset(CPU_KEY, str(os.getpid()), cpu)
    pipe.execute()


_counter = _Counter()
os.register_at_fork(after_in_child=_counter.after_fork)
atexit.register(lambda: _counter.flush() if _counter.pending else None)


def done() -> None:
    """Count one completed job."""
    if os.environ.get("BENCH_DONE_SYNC") == "1":
        now = time.time()
        report(1, now, now)
    else:
        _counter.add()


def spin(iters: int) -> int:
    """Pure-Python CPU work: the W5 body."""
    acc = 0
    for i in range(iters):
        acc = (acc + i * i) % 1_000_003
    return acc


_seq = itertools.count()  # next() on a count is atomic under the GIL: unique keys per process
IO_TTL = 60


def _io_key() -> str:
    return f"bench:io:{os.getpid()}:{next(_seq)}"


def redis_io() -> None:
    """One pipelined round trip of two commands on a key of this job's own."""
    key = _io_key()
    pipe = client().pipeline(transaction=False)
    pipe.incr(key)
    pipe.expire(key, IO_TTL)
    pipe.execute()


_aclients: dict[int, Any] = {}


async def aredis_io() -> None:
    """``redis_io`` with ``redis.asyncio``: one client per event loop (per process)."""
    loop_id = id(asyncio.get_running_loop())
    r = _aclients.get(loop_id)
    if r is None:
        r = _aclients[loop_id] = aredis.Redis.from_url(os.environ["BENCH_DONE_URL"])
    key = _io_key()
    pipe = r.pipeline(transaction=False)
    pipe.incr(key)
    pipe.expire(key, IO_TTL)
    await pipe.execute()


class _Sqlite:
    """This process's SQLite file: one connection, one writer at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conn: sqlite3.Connection | None = None
        self.pid = -1

    def write(self, ts: float) -> None:
        with self.lock:
            if self.pid != os.getpid():
                folder = os.environ.get("BENCH_SQLITE_DIR", "/tmp")
                path = os.path.join(folder, f"body-{os.getpid()}.db")
                conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("CREATE TABLE IF NOT EXISTS io"
                             " (id INTEGER PRIMARY KEY, ts REAL, note TEXT)")
                self.conn, self.pid = conn, os.getpid()
            assert self.conn is not None
            self.conn.execute("BEGIN")
            self.conn.execute("INSERT INTO io (ts, note) VALUES (?, ?)", (ts, "job"))
            self.conn.execute("COMMIT")


_sqlite = _Sqlite()

PG_TABLE = "CREATE TABLE IF NOT EXISTS io (id bigserial PRIMARY KEY, ts float8, note text)"
PG_INSERT = "INSERT INTO io (ts, note) VALUES (%s, %s)"
_pg = threading.local()  # .conn, .pid: this thread's connection (psycopg: one per thread)


def pg_write(ts: float) -> None:
    """One INSERT and COMMIT on this thread's own connection."""
    import psycopg  # only the PostgreSQL peers' venvs have it

    if getattr(_pg, "pid", -1) != os.getpid():
        _pg.conn = psycopg.connect(os.environ["BENCH_PG_BODY_URL"])
        _pg.pid = os.getpid()
    _pg.conn.execute(PG_INSERT, (ts, "job"))
    _pg.conn.commit()


_apg: dict[int, Any] = {}  # event loop id -> asyncio.Queue of idle AsyncConnections


async def apg_write(ts: float) -> None:
    """The same with ``psycopg.AsyncConnection``: a connection from this loop's pool (a new one
    when every one is busy, so the pool grows to the number of concurrent jobs)."""
    import psycopg

    pool = _apg.setdefault(id(asyncio.get_running_loop()), asyncio.Queue())
    conn = pool.get_nowait() if not pool.empty() else await psycopg.AsyncConnection.connect(
        os.environ["BENCH_PG_BODY_URL"])
    try:
        await conn.execute(PG_INSERT, (ts, "job"))
        await conn.commit()
    finally:
        pool.put_nowait(conn)


def run(kind: str, ts: float) -> None:
    """The job: optionally record enqueue-to-start latency, do the work, count completion."""
    if kind == "lat":
        client().rpush(LAT_KEY, repr(time.time() - ts))
    elif kind == "sleep":
        time.sleep(float(os.environ.get("BENCH_SLEEP", "0.02")))
    elif kind == "cpu":
        spin(int(os.environ.get("BENCH_CPU_ITERS", "100000")))
    elif kind == "redis":
        redis_io()
    elif kind == "sqlite":
        _sqlite.write(ts)
    elif kind == "pg":
        pg_write(ts)
    elif kind in ASYNC_KINDS:
        raise ValueError(f"the {kind!r} body needs an asyncio engine")
    done()


async def arun(kind: str, ts: float) -> None:
    """The same job for asyncio engines: the I/O wait is ``asyncio.sleep``, a
    ``redis.asyncio`` round trip or an ``AsyncConnection`` write, the rest identical."""
    if kind in ("sleep", "asleep"):
        await asyncio.sleep(float(os.environ.get("BENCH_SLEEP", "0.02")))
        done()
    elif kind == "aredis":
        await aredis_io()
        done()
    elif kind == "pg":
        await apg_write(ts)
        done()
    else:
        run(kind, ts)
