"""Scenarios 36-38: durable jobs under faults (docs/durable.md).

36. kill -9 storms over jobs of ten steps: every job finishes, every step is recorded once,
    and a step ran twice only when the worker running it was killed before its record (the
    at-least-once boundary, never beyond it). Full on SQLite, smaller on the other stores.
37. Events sent while workers are killed reach each waiter once (the job type keeps events,
    so one sent before its wait began counts too; each event is sent twice with one id, as a
    client retrying through an outage does).
38. The store restarted while jobs sleep (SQLite: every worker gone and the file opened
    again; Redis from its AOF; PostgreSQL after a crash): every sleeper wakes and finishes.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from conveyor.app import Conveyor
from conveyor.errors import StorageUnavailable
from tests.faults.checks import enqueue_batch, states, wait_batch
from tests.faults.conftest import Backend, Faults
from tests.faults.harness import ExecLog, WorkerProc, report, wait_until
from tests.faults.test_postgres_faults import _crash
from tests.support.postgres_server import PostgresServer
from tests.support.redis_server import RedisServer, redis_server_binary

LEASE = 3.0
STEPS = 10
#: backend -> (jobs, storm seconds): the whole storm on SQLite, a smaller one elsewhere.
SIZES = {"sqlite": (200, 8.0), "postgres": (40, 3.0), "redis": (40, 3.0),
         "redis_cluster": (40, 3.0)}


def _storm(faults: Faults, url: str, workers: list[WorkerProc], seconds: float,
           rng: random.Random, **opts: Any) -> dict[int, float]:
    """Kill a random worker every 1-1.6 s for ``seconds`` and start another at once."""
    kills: dict[int, float] = {}
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(rng.uniform(1.0, 1.6))
        i = rng.randrange(len(workers))
        kills[workers[i].pid] = workers[i].kill9()
        workers[i] = faults.worker(url, name=f"storm{len(faults.workers)}", **opts)
    return kills


def _step_runs(log: ExecLog) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every run of every step, by (job id, step index), in start order."""
    runs: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for line in log.lines():
        if line["s"] == "step":
            runs[(line["j"], line["i"])].append(line)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(SIZES), indirect=True)
def test_kill9_storm_over_durable_steps(backend: Backend, faults: Faults) -> None:
    """200 jobs of 10 steps of 20-40 ms on 2 workers of 4 slots (40 off SQLite), a worker
    SIGKILLed every ~1.3 s for 8 s (3 s). DBOS's promise: a completed step never runs again;
    one interrupted before its record runs again."""
    count, seconds = SIZES[backend.name]
    rng = random.Random(55)
    app, jobs = faults.client(backend.url)
    batch_id, ids = enqueue_batch(app, jobs["faults.steps"], [(STEPS, 20, 40)] * count,
                                  "durable storm")
    opts = {"concurrency": 4, "lease": LEASE}
    workers = [faults.worker(backend.url, name=f"d{i}", **opts) for i in range(2)]
    wait_until(lambda: len(_step_runs(faults.log)) > 20, 60, what="steps to run")
    kills = _storm(faults, backend.url, workers, seconds, rng, **opts)
    wait_batch(app, batch_id, timeout=LEASE + 120)
    assert states(app, ids) == {"succeeded": count}

    runs = _step_runs(faults.log)
    assert len(runs) == count * STEPS  # every step of every job ran
    twice = {key: r for key, r in runs.items() if len(r) > 1}
    unexplained = [key for key, r in twice.items() if any(run["p"] not in kills for run in r[:-1])]
    assert unexplained == [], "a step ran again although its worker was not killed in it"
    for job_id in ids:
        recorded = app.storage.durable.read(job_id).steps
        assert [s.name for s in recorded] == [f"s{i}" for i in range(STEPS)]
        for i, step in enumerate(recorded):  # the record is the last run's, under its lease
            assert step.attempt == runs[(job_id, i)][-1]["a"]
            assert step.result == str(i)
    report("36 kill -9 storm, durable steps", backend.name, jobs=count, steps=count * STEPS,
           kills=len(kills), steps_run_twice=len(twice),
           step_runs=sum(len(r) for r in runs.values()))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"], indirect=True)
def test_events_sent_during_kills_reach_each_waiter_once(backend: Backend,
                                                         faults: Faults) -> None:
    """100 jobs wait for their own event (40 on Redis) while the test sends each event twice
    under one id, a worker killed every ~1.3 s meanwhile: every job gets its event, once."""
    count = 100 if backend.name == "sqlite" else 40
    rng = random.Random(29)
    app, jobs = faults.client(backend.url)
    keys = [f"k{n}" for n in range(count)]
    batch_id, ids = enqueue_batch(app, jobs["faults.waiter"], [(k,) for k in keys], "waiters")
    opts = {"concurrency": 4, "lease": LEASE}
    workers = [faults.worker(backend.url, name=f"e{i}", **opts) for i in range(2)]
    sent: Counter[str] = Counter()

    def send_some(batch: list[str]) -> None:
        for key in batch:
            for _ in range(2):  # a client that retries its send: the same event id
                app.send_event("faults.event", key=key, data={"key": key},
                               event_id=f"ev-{key}")
                sent[key] += 1

    order = keys[:]
    rng.shuffle(order)
    first, rest = order[: count // 2], order[count // 2:]
    send_some(first)  # many before their job waits: kept for the window
    kills = _storm(faults, backend.url, workers, 4.0, rng, **opts)
    send_some(rest)
    wait_batch(app, batch_id, timeout=LEASE + 120)
    assert states(app, ids) == {"succeeded": count}
    for job_id, key in zip(ids, keys, strict=True):
        record = app.get_job(job_id)
        assert record is not None and record.result == f'{{"key":"{key}"}}'
        history = app.storage.durable.read(job_id)
        assert history.inbox == 0  # nothing delivered twice waits behind
        assert [s.origin for s in history.steps if s.name.startswith("wait:")] == [f"ev-{key}"]
    afters = Counter(line["j"] for line in faults.log.lines() if line["s"] == "after")
    assert set(afters) == set(ids)
    report("37 events during kills", backend.name, waiters=count, kills=len(kills),
           sends=sum(sent.values()), after_steps_run_twice=sum(1 for n in afters.values()
                                                               if n > 1))


SLEEPERS = 20


def _answers(app: Conveyor) -> bool:
    """True once the store answers this client again (its first call after a crash finds
    its old connection gone, and reconnects on the next)."""
    try:
        app.storage.count_jobs()
    except StorageUnavailable:
        return False
    return True


def _sleep_through(faults: Faults, url: str, store: str,
                   restart: Callable[[WorkerProc, Conveyor], None]) -> None:
    """20 jobs of a step, a 3 s sleep and a step; ``restart`` the store while every one of
    them sleeps: each wakes and finishes, its first step never run again."""
    app, jobs = faults.client(url)
    batch_id, ids = enqueue_batch(app, jobs["faults.sleeper"], [(3.0,)] * SLEEPERS, "sleepers")
    worker = faults.worker(url, name="before", lease=LEASE)
    wait_until(lambda: states(app, ids) == {"scheduled": SLEEPERS}, 60,
               what="every job to sleep")
    restart(worker, app)
    wait_until(lambda: _answers(app), 30, what="the client to reach the store again")
    wait_batch(app, batch_id, timeout=90)
    assert states(app, ids) == {"succeeded": SLEEPERS}
    befores = Counter(line["j"] for line in faults.log.lines()
                      if line["s"] == "after" and line["got"] == "before")
    assert befores == dict.fromkeys(ids, 1)
    # The outage is the store's, not the jobs': none spends an attempt on it (a thread's
    # connection the restart ended was used as is, and each step save failed, until
    # storage/postgres/connection.py's ``dropped`` replaced it; each job then waited out a
    # 17-31 s retry backoff).
    spent = {job_id: rec.errors for job_id in ids
             if (rec := app.storage.get_job(job_id)) is not None and rec.errors}
    assert spent == {}
    report("38 store restarted while sleeping", store, sleepers=SLEEPERS)


@pytest.mark.slow
def test_sqlite_reopened_while_jobs_sleep(tmp_path: Any, faults: Faults) -> None:
    """Every worker killed while the jobs sleep, the client closed: a new worker opens the
    file afresh."""
    url = f"sqlite:///{tmp_path / 'sleep.db'}"

    def reopen(worker: WorkerProc, app: Conveyor) -> None:
        worker.kill9()
        app.close()  # nothing holds the file open now
        faults.worker(url, name="after")

    _sleep_through(faults, url, "sqlite", reopen)


@pytest.mark.slow
@pytest.mark.skipif(redis_server_binary() is None, reason="needs redis-server")
def test_redis_restarted_while_jobs_sleep(aof_server: RedisServer, faults: Faults) -> None:
    """redis-server SIGKILLed and started again from its AOF (fsync always): the worker
    rides out the outage."""
    def restart(worker: WorkerProc, app: Conveyor) -> None:
        aof_server.kill()
        time.sleep(1.0)
        aof_server.start()

    _sleep_through(faults, f"{aof_server.url}?prefix=sleep", "redis", restart)


@pytest.mark.slow
def test_postgres_restarted_while_jobs_sleep(private_server: PostgresServer,
                                             faults: Faults) -> None:
    """The postmaster SIGKILLed and restarted (crash recovery), as scenario 16 does."""
    def restart(worker: WorkerProc, app: Conveyor) -> None:
        _crash(private_server)
        time.sleep(1.0)
        private_server.start()

    _sleep_through(faults, f"{private_server.url}?schema=sleep", "postgres", restart)
