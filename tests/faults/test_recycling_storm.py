"""Recycling under a kill -9 storm: ``conveyor worker --processes 2`` replaces its processes
every few dozen jobs (``--max-jobs-per-child``) while a random worker process is SIGKILLed
every ~1.5 s. Nothing is lost, nothing runs twice but what a kill interrupted, and the
batch counters are exact; with ``--executor process`` the job processes of a killed worker
die with it (a job never runs on after the worker that held its lease is gone).

Expectations from the peers: Celery's ``worker_max_tasks_per_child`` replaces pool processes
while the worker serves (no task lost to a replacement), and a pool process killed under a task
loses only that task's attempt (``acks_late`` redelivers it).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable

import pytest

from tests.faults.checks import assert_batch_exact, enqueue_batch, states, wait_batch
from tests.faults.conftest import Backend, Faults
from tests.faults.harness import ExecLog, WorkerProc, report, wait_until

LEASE = 3.0
STORM_SECONDS = 8.0


def _running(log: ExecLog, pids: list[int]) -> list[int]:
    """The worker processes among ``pids`` running a job now (in a thread, or in one of
    their job processes)."""
    busy: set[int] = set()
    for runs in log.executions().values():
        for run in runs:
            if run.ended is None:
                busy |= {run.pid, int(run.extra.get("pp", 0))}
    return [pid for pid in pids if pid in busy]


def _storm(faults: Faults, supervisor: WorkerProc, rng: random.Random,
           done: Callable[[], bool]) -> dict[int, float]:
    """SIGKILL a random busy worker process of ``supervisor`` every ~1.5 s until ``done``;
    kill times by pid. Its supervisor releases its jobs and starts another at once."""
    kills: dict[int, float] = {}
    end = time.time() + STORM_SECONDS
    while time.time() < end:
        time.sleep(rng.uniform(1.2, 1.8))
        busy = wait_until(lambda: _running(faults.log, supervisor.children()) or done(), 60,
                          what="a worker process to run a job")
        if busy is True:
            break
        victim = rng.choice(busy)
        kills[victim] = time.time()
        with contextlib.suppress(ProcessLookupError):  # it may have just been recycled
            os.kill(victim, signal.SIGKILL)
    return kills


def _killed_pids(faults: Faults, kills: dict[int, float]) -> dict[str, list[str]]:
    """Per job, the executions that ended after their worker process was killed: none may
    (``--executor process``: a killed worker's job processes die with it)."""
    late: dict[str, list[str]] = {}
    for job_id, runs in faults.log.executions().items():
        for run in runs:
            owner = run.pid if run.pid in kills else int(run.extra.get("pp", 0))
            if owner in kills and run.ended is not None and run.ended > kills[owner] + 0.5:
                late.setdefault(job_id, []).append(f"pid {run.pid} ended {run.ended}")
    return late


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "executor"), [
    ("sqlite", "thread"), ("redis", "thread"), ("sqlite", "process")],
    indirect=["backend"])
def test_recycled_processes_under_a_kill9_storm_lose_and_double_nothing(
        backend: Backend, executor: str, faults: Faults) -> None:
    count = 1200 if backend.name == "sqlite" else 800
    rng = random.Random(56)
    app, jobs = faults.client(backend.url)
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(rng.randint(20, 50),)
                                                            for _ in range(count)],
                                  "recycling storm")
    supervisor = faults.worker(backend.url, name=f"recycling-{executor}", processes=2,
                               concurrency=4, lease=LEASE,
                               args=["--executor", executor, "--max-jobs-per-child", "40"])
    wait_until(lambda: faults.log.starts() > 20, 60, what="the workers to start working")

    def done() -> bool:
        status = app.storage.get_batch(batch_id)
        return status is not None and status.complete

    kills = _storm(faults, supervisor, rng, done)
    assert kills, "the storm killed nothing"
    wait_batch(app, batch_id, timeout=LEASE + 120)
    assert states(app, ids) == {"succeeded": count}  # none lost
    assert_batch_exact(app, batch_id, {"succeeded": count})
    runs = faults.log.executions()
    unexplained = [job_id for job_id in ids for run in runs.get(job_id, [])[:-1]
                   if run.pid not in kills and int(run.extra.get("pp", 0)) not in kills]
    assert unexplained == [], "jobs ran twice although no kill interrupted them"
    assert _killed_pids(faults, kills) == {}, "a job ran on after its worker was killed"
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0
    recycled = supervisor.output.count("recycled after")
    job_processes = len({run.pid for rs in runs.values() for run in rs} - set(kills))
    if executor == "thread":
        assert recycled > 0, "no worker process was recycled"
    else:  # a job process runs 40 jobs, then another takes its place
        assert job_processes > count // 40 // 2
    report(f"56 recycling under kill -9 ({executor})", backend.name, jobs=count,
           kills=len(kills), lost=0, extra_runs=sum(len(r) - 1 for r in runs.values()),
           recycled_worker_processes=recycled, processes_that_ran_jobs=job_processes)
