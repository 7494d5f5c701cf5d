"""Scenario 15: a worker process killed by the kernel (OOM, segfault) on a machine that
survives. ``conveyor worker --processes 2`` runs with a 60 s lease; the child running a long
job is SIGKILLed. The supervisor learns of the death at once (``waitpid``) and releases the
child's leases, so the job runs again, started by another process, although its 60 s lease
cannot have expired: only the release can have put it back. The delay is measured and
reported, never asserted."""

from __future__ import annotations

import os
import signal
import time

import pytest

from conveyor.core.job import EventKind
from tests.faults.checks import succeeded
from tests.faults.conftest import BACKENDS, Backend, Faults
from tests.faults.harness import Execution, report, wait_until

LEASE = 60.0
JOB_MS = 3000  # long enough to be running when its process is killed


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_killed_childs_job_runs_again_before_its_lease_could_expire(
    backend: Backend, faults: Faults
) -> None:
    app, jobs = faults.client(backend.url)
    supervisor = faults.worker(backend.url, name="supervised", processes=2, concurrency=2,
                               lease=LEASE)
    wait_until(lambda: len(supervisor.children()) == 2, 30, what="two worker processes")
    ref = jobs["faults.work"].enqueue(JOB_MS)
    assert ref is not None

    def runs(count: int) -> list[Execution] | None:
        found = faults.log.executions().get(ref.id, [])
        return found if len(found) >= count else None

    first = wait_until(lambda: runs(1), 30, what="the job to start")[0]
    children = supervisor.children()
    assert first.pid in children
    killed_at = time.time()
    os.kill(first.pid, signal.SIGKILL)  # as the OOM killer would: no cleanup, no hand-back

    # The deadline is half the lease: a rerun within it cannot come from an expired lease.
    again = wait_until(lambda: runs(2), LEASE / 2, what="the job to run again")[1]
    assert again.pid != first.pid, "the job must run again in another process"
    assert again.started < first.started + LEASE
    rec = wait_until(lambda: succeeded(app, ref.id), 30, what="the rerun to finish")
    assert (rec.attempt, rec.recoveries, rec.errors) == (2, 1, 0)
    recovered = [e for e in rec.events or () if e.kind == EventKind.RECOVERED]
    assert len(recovered) == 1 and "worker process died" in (recovered[0].message or "")
    assert len(faults.log.executions()[ref.id]) == 2
    assert supervisor.alive(), "the supervisor survives its child's death"
    wait_until(lambda: "put back at once" in supervisor.output, 10,
               what="the supervisor's helper to log the release")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0
    report("15 child SIGKILLed, lease 60 s", backend.name,
           rerun_after_kill_s=again.started - killed_at,
           rerun_in="the other child" if again.pid in children else "the restarted child",
           recoveries=rec.recoveries, errors=rec.errors)
