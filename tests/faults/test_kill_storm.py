"""Scenario 1: ``kill -9`` storms. Nothing acknowledged is lost, a crashed job is runnable
again within its lease, and the batch counters are exact afterwards."""

from __future__ import annotations

import random
import time

import pytest

from conveyor import Conveyor
from tests.faults.checks import (
    assert_batch_exact,
    enqueue_batch,
    extra_runs,
    recovery_delays,
    states,
    wait_batch,
)
from tests.faults.conftest import BACKENDS, Backend, Faults
from tests.faults.harness import report, wait_until

#: The full storm runs on SQLite, the default engine (the suite's rule: a heavy scenario in
#: full on one store, a smoke run on the others). PostgreSQL, Redis and Redis Cluster, whose
#: every transition the conformance suite and the fuzzers prove, get a smaller one that still
#: kills a worker three or four times mid-batch (1,000 x 20-50 ms on 8 slots is ~4.5 s of
#: work): the same checks, fewer kills. backend -> (jobs, storm seconds).
SIZES = {"sqlite": (2400, 12.0), "redis": (1000, 5.0), "postgres": (1000, 5.0),
         "redis_cluster": (1000, 5.0)}
STORM_LEASE = 3.0
# Recoverer tick (~1 s) plus a generous margin for a loaded 2-core machine.
SLACK = 6.0


def _storm(backend: Backend, faults: Faults, rng: random.Random, seconds: float,
           name: str) -> dict[int, float]:
    """Two workers (4 slots, the storm's lease); once they work, a random one SIGKILLed every
    ~1.5 s for ``seconds`` and restarted at once. Returns pid -> when it was killed."""
    opts = {"concurrency": 4, "lease": STORM_LEASE}
    workers = [faults.worker(backend.url, name=f"{name}{i}", **opts) for i in range(2)]
    wait_until(lambda: faults.log.starts() > 50, 30, what="the workers to start working")
    kills: dict[int, float] = {}
    storm_end = time.time() + seconds
    while time.time() < storm_end:
        time.sleep(rng.uniform(1.2, 1.8))
        i = rng.randrange(2)
        pid = workers[i].pid
        kills[pid] = workers[i].kill9()
        workers[i] = faults.worker(backend.url, name=f"{name}{len(faults.workers)}", **opts)
    return kills


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_kill9_storm_loses_nothing(backend: Backend, faults: Faults) -> None:
    """2 workers, 2,400 jobs of 20-50 ms (1,000 on the smoke runs), a random worker SIGKILLed
    every ~1.5 s for ~12 s (5 s) and restarted at once."""
    count, storm_seconds = SIZES[backend.name]
    rng = random.Random(1234)
    app, jobs = faults.client(backend.url)
    items = [(rng.randint(20, 50),) for _ in range(count)]
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], items, "kill -9 storm")
    kills = _storm(backend, faults, rng, storm_seconds, "storm")
    last_kill = max(kills.values())

    _, done_at = wait_batch(app, batch_id, timeout=STORM_LEASE + SLACK + 60)
    assert states(app, ids) == {"succeeded": count}
    assert_batch_exact(app, batch_id, {"succeeded": count})
    runs = extra_runs(faults.log, ids, set(kills))
    assert runs.unexplained == [], "jobs ran twice although their worker was not killed"
    delays = recovery_delays(app, faults.log, kills)
    assert delays, "no kill hit a running job; the storm proved nothing"
    assert max(delays) < STORM_LEASE + SLACK
    # Once the last crashed job is runnable again the rest drains at full speed.
    assert done_at - last_kill < STORM_LEASE + SLACK + 30
    report(
        "1 kill -9 storm (lease 3 s)", backend.name, jobs=count, kills=len(kills), lost=0,
        extra_runs=runs.extra_runs, max_recovery_s=max(delays),
        drained_after_last_kill_s=done_at - last_kill,
    )


def _lease_expiry(app: Conveyor, job_id: str) -> float:
    rec = app.get_job(job_id)
    assert rec is not None and rec.lease_expires_at is not None, job_id
    return rec.lease_expires_at


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["redis"], indirect=True)
def test_kill9_default_settings_recover_within_lease(backend: Backend, faults: Faults) -> None:
    """Default lease (10 s), heartbeat (2 s) and recoverer (~1 s): jobs running on a worker
    that is SIGKILLed are runnable again about 11 s later and finish on another worker."""
    app, jobs = faults.client(backend.url)
    # The first run (30 s) outlasts the kill; the rescue's (100 ms) costs no wait.
    batch_id, ids = enqueue_batch(app, jobs["faults.long_first"], [(30_000, 100)] * 2,
                                  "default lease")
    doomed = faults.worker(backend.url, name="doomed", concurrency=2)
    wait_until(lambda: faults.log.starts() == 2, 30, what="both jobs to start")
    first = {job_id: _lease_expiry(app, job_id) for job_id in ids}
    # The kill comes once a heartbeat has extended both leases (the rule is the lease as
    # the heartbeat left it, not as the lease began).
    wait_until(lambda: all(_lease_expiry(app, job_id) > first[job_id] for job_id in ids), 30,
               what="a heartbeat to extend both leases")
    killed_at = doomed.kill9()
    faults.worker(backend.url, name="rescuer", concurrency=2)

    _, done_at = wait_batch(app, batch_id, timeout=40)
    assert states(app, ids) == {"succeeded": 2}
    assert_batch_exact(app, batch_id, {"succeeded": 2})
    runs = extra_runs(faults.log, ids, {doomed.pid})
    assert runs.unexplained == [] and runs.extra_runs == 2
    delays = recovery_delays(app, faults.log, {doomed.pid: killed_at})
    assert len(delays) == 2
    assert max(delays) < 15 + SLACK
    for job_id in ids:
        rec = app.get_job(job_id)
        assert rec is not None and rec.recoveries == 1 and rec.errors == 0
    report(
        "1 kill -9 at default settings", backend.name, lost=0, extra_runs=runs.extra_runs,
        recovery_s=max(delays), done_after_kill_s=done_at - killed_at,
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis"], indirect=True)
def test_kill9_storm_with_priority_and_fair_turns_loses_nothing(backend: Backend,
                                                                faults: Faults) -> None:
    """Issue 54's proof: the storm above with every job placed by its queue's lineup (six
    fair keys, three priorities, aging): nothing is lost, every key's jobs all run, a job
    runs twice only when its worker was killed. A smoke size on each store whose lineup is
    its own code (the walk in Python, PL/pgSQL and Lua)."""
    rng = random.Random(54)
    app, jobs = faults.client(backend.url)
    with app.batch(description="lineup storm") as batch:
        refs = []
        for key in range(6):
            lined = jobs["faults.work"].options(priority=(key % 3) * 10 - 10,
                                                fair_by=f"acct:{key}", aging=2.0)
            refs += lined.enqueue_many([(rng.randint(20, 50),) for _ in range(100)])
    ids = [ref.id for ref in refs]
    kills = _storm(backend, faults, rng, 5.0, "lined")

    wait_batch(app, batch.id, timeout=STORM_LEASE + SLACK + 60)
    assert states(app, ids) == {"succeeded": len(ids)}
    assert_batch_exact(app, batch.id, {"succeeded": len(ids)})
    runs = extra_runs(faults.log, ids, set(kills))
    assert runs.unexplained == [], "jobs ran twice although their worker was not killed"
    report("1 kill -9 storm, lineup (priority, fair turns, aging)", backend.name,
           jobs=len(ids), kills=len(kills), lost=0, extra_runs=runs.extra_runs)
