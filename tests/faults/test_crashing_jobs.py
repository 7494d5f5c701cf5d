"""Scenarios 5 and 10: jobs that kill their own process.

A poison job (``os._exit`` or a segfault) ends ``dead`` with a reason after the recovery
limit while the rest of its batch finishes; a job that dies between its side effect and its
acknowledgement runs again exactly once and can tell from ``current_job().attempt``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conveyor.app import Conveyor
from conveyor.core.job import EventKind, JobRecord, JobState
from tests.faults.checks import (
    assert_batch_exact,
    describe,
    extra_runs,
    wait_batch,
)
from tests.faults.conftest import BACKENDS, Backend, Faults
from tests.faults.harness import report, wait_until

LEASE = 3.0
MAX_RECOVERIES = 5  # WorkerConfig default: dead after more than 5 recoveries
# -c 4 once lost normal jobs: a fetch with a recovered job queued the others' hand-backs on
# the asynchronous acker and started the suspect at once, so a crash before the write left
# them leased, recovered with it, and dead after 6 recoveries without running. Isolation now
# writes hand-backs before starting anything, and runs suspects one at a time per process.
POISON_CONCURRENCY = 4


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis_cluster"], indirect=True)
def test_poison_jobs_go_dead_and_the_batch_finishes(backend: Backend, faults: Faults) -> None:
    """One job calls ``os._exit``, one segfaults, 200 are normal; ``--processes 2`` restarts
    the dead processes. The poison jobs are leased 1 + 5 times (or more: see below), then end
    dead with a reason, and every normal job finishes (``-c 4``: normal jobs run beside the
    poison ones and are recovered with them, once)."""
    app, jobs = faults.client(backend.url)
    with app.batch(description="poison") as batch:
        poison = [ref.id for ref in jobs["faults.crash"].enqueue_many([("exit",), ("segv",)])]
        normal = [ref.id for ref in jobs["faults.work"].enqueue_many([(20,)] * 200)]
    worker = faults.worker(backend.url, name="supervised", processes=2,
                           concurrency=POISON_CONCURRENCY, lease=LEASE)

    wait_batch(app, batch.id, timeout=80)
    runs = faults.log.executions()
    lost = [j for j in normal if (app.get_job(j) or _never()).state is not JobState.SUCCEEDED]
    assert lost == [], describe(app, lost, runs, time.time())
    assert_batch_exact(app, batch.id, {"succeeded": 200, "dead": 2})
    crashed = {run.pid for job_id in poison for run in runs[job_id]}
    for job_id in poison:
        rec = app.get_job(job_id)
        assert rec is not None and rec.state is JobState.DEAD
        assert rec.message, "a dead poison job must say why"
        kinds = [e.kind for e in rec.events or ()]
        assert kinds.count(EventKind.RECOVERED) == MAX_RECOVERIES
        assert kinds[-1] == EventKind.DEAD
        # Each lease counts an attempt, also one handed back unstarted (a recovered job
        # waits to run alone); a run can be cut before it starts when the other poison job
        # kills the process it was leased to.
        assert rec.attempt >= MAX_RECOVERIES + 1
        assert 1 <= len(runs[job_id]) <= MAX_RECOVERIES + 1
    assert extra_runs(faults.log, normal, crashed).unexplained == []
    assert worker.alive(), "the supervisor itself must survive its children's crashes"
    report(
        "5 poison job (exit + segv)", backend.name,
        poison_attempts=app.get_job(poison[0]).attempt,  # type: ignore[union-attr]
        dead_reason=app.get_job(poison[0]).message,  # type: ignore[union-attr]
        normal_lost=0,
        processes_crashed=len(crashed),
    )


def _never() -> JobRecord:
    raise AssertionError("a job of the batch is missing")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_death_between_side_effect_and_ack_reruns_once(
    backend: Backend, faults: Faults, tmp_path: Path
) -> None:
    """The job appends to a file, then ``os._exit`` on attempt 1. It runs exactly once more,
    on the surviving worker, and sees ``attempt == 2`` and no error attempts."""
    app, jobs = faults.client(backend.url)
    side = tmp_path / "side-effect.txt"
    for i in range(2):
        faults.worker(backend.url, name=f"w{i}", concurrency=2, lease=LEASE)
    ref = jobs["faults.write_then_die"].enqueue(str(side))
    assert ref is not None

    rec = wait_until(lambda: _finished(app, ref.id), 40, what="the job to finish")
    assert rec.state is JobState.SUCCEEDED
    assert side.read_text().splitlines() == ["1 0", "2 0"]  # "attempt errors" per run
    assert json.loads(rec.result or "null") == 2
    assert rec.attempt == 2 and rec.recoveries == 1 and rec.errors == 0
    assert len(faults.log.executions()[ref.id]) == 2
    report("10 die after side effect", backend.name, runs=2, seen_attempts="1,2", lost=0)


def _finished(app: Conveyor, job_id: str) -> JobRecord | None:
    rec = app.get_job(job_id)
    return rec if rec is not None and rec.state.terminal else None
