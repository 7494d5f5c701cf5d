"""Scenario 8: workers whose wall clocks are 5 minutes apart neither steal live leases nor
delay recovery, because every lease is set and compared with the storage's clock (on Redis,
the server's ``TIME``).

The skew is applied inside the worker processes (``tests.faults.apps.skewed``) because
Debian's libfaketime 0.9.10 hangs or breaks Python's timed waits (see that module).
SQLite is not run here: every process on one file shares one machine clock, so skew between
its workers cannot happen outside a test harness (see docs/reliability.md).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conveyor.core.job import EventKind
from tests.faults.apps.skewed import SKEW_ENV
from tests.faults.checks import (
    assert_batch_exact,
    describe,
    enqueue_batch,
    recovery_delays,
    states,
    wait_batch,
)
from tests.faults.conftest import Backend, Faults
from tests.faults.harness import REPO, report, wait_until

LEASE = 3.0
SKEW = 300.0
SLACK = 6.0
SKEWED_APP = "tests.faults.apps.skewed:app"


def skewed(offset: float) -> dict[str, object]:
    """Worker options for a process whose wall clock is ``offset`` seconds off."""
    return {"app_ref": SKEWED_APP, "env": {SKEW_ENV: str(offset)}}


def test_skewed_app_moves_the_wall_clock() -> None:
    """The premise: a process that loads the skewed app sees ``time.time()`` 5 min ahead."""
    code = "import time, tests.faults.apps.skewed; print(time.time())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO, env={SKEW_ENV: str(SKEW), "PATH": ""})
    assert abs(float(out.stdout) - time.time() - SKEW) < 30


@pytest.mark.slow
# Single Redis only: Cluster runs the same scripts with the same TIME rule, and its nodes here
# share this machine's clock, so a Cluster run proved nothing more (17 s of the suite's budget).
@pytest.mark.parametrize("backend", ["redis"], indirect=True)
def test_skewed_workers_neither_steal_nor_strand(backend: Backend, faults: Faults) -> None:
    """A worker 5 min fast and one 5 min slow share 3 s jobs on 3 s leases: no job is taken
    from a live holder. Then the fast one is SIGKILLed: its jobs are recovered on time."""
    app, jobs = faults.client(backend.url)
    fast = faults.worker(backend.url, name="fast", concurrency=2, lease=LEASE, **skewed(SKEW))
    slow = faults.worker(backend.url, name="slow", concurrency=2, lease=LEASE, **skewed(-SKEW))

    shared_id, shared = enqueue_batch(app, jobs["faults.work"], [(3000,)] * 6, "skew shared")
    wait_batch(app, shared_id, timeout=60)
    assert_batch_exact(app, shared_id, {"succeeded": 6})
    runs = faults.log.executions()
    stolen = [job_id for job_id in shared if len(runs[job_id]) > 1]
    assert stolen == [], "a live lease was stolen:\n" + describe(app, stolen, runs, time.time())
    for job_id in shared:
        rec = app.get_job(job_id)
        assert rec is not None and rec.recoveries == 0
    # The skew was real: each worker's jobs saw its own wall clock.
    seen = {run[0].pid: run[0].started - time.time() for run in runs.values()}
    assert seen.get(fast.pid, 0) > SKEW - 60 and seen.get(slow.pid, 0) < -SKEW + 60, seen

    crash_id, crash = enqueue_batch(app, jobs["faults.work"], [(3000,)] * 4, "skew crash")
    wait_until(lambda: _running_on(faults, crash, fast.pid), 30, what="the fast worker's jobs")
    killed_at = fast.kill9()
    wait_batch(app, crash_id, timeout=60)
    assert states(app, crash) == {"succeeded": 4}
    delays = recovery_delays(app, faults.log, {fast.pid: killed_at})
    assert delays and max(delays) < LEASE + SLACK
    for job_id in crash:
        rec = app.get_job(job_id)
        assert rec is not None
        assert sum(e.kind == EventKind.RECOVERED for e in rec.events or ()) <= 1
    report("8 clock skew +/-5 min", backend.name, stolen=0, lost=0,
           recovery_s=max(delays), lease_s=LEASE)


def _running_on(faults: Faults, ids: list[str], pid: int) -> bool:
    runs = faults.log.executions()
    return any(run.pid == pid for job_id in ids for run in runs.get(job_id, []))
