"""Scenario 9: a zombie worker. The job freezes its own process (SIGSTOP) for longer than its
lease; another worker re-runs it; when the frozen worker is woken (SIGCONT), fencing keeps its
late outcome out: either its acknowledgement is refused by the lease token (the job's history
shows an ``ack_refused`` event) or its heartbeat learns first that the lease is gone and the
worker drops the outcome. The recorded outcome stays the new holder's. (The storage's refusal
itself is checked deterministically in tests/conformance/test_leases.py.)"""

from __future__ import annotations

import json
import signal
import time

import pytest

from conveyor.app import Conveyor
from conveyor.core.job import EventKind, JobRecord, JobState
from tests.faults.checks import succeeded
from tests.faults.conftest import BACKENDS, Backend, Faults
from tests.faults.harness import process_state, report, wait_until

LEASE = 3.0


def _refused(app: Conveyor, job_id: str) -> JobRecord | None:
    rec = app.get_job(job_id)
    if rec is not None and any(e.kind == EventKind.ACK_REFUSED for e in rec.events or ()):
        return rec
    return None


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_woken_zombie_cannot_overwrite_the_new_holders_outcome(
    backend: Backend, faults: Faults
) -> None:
    """The frozen holder's result (its pid) never replaces the rescuer's."""
    app, jobs = faults.client(backend.url)
    zombie = faults.worker(backend.url, name="zombie", concurrency=1, lease=LEASE)
    ref = jobs["faults.stall"].enqueue()
    assert ref is not None
    wait_until(lambda: process_state(zombie.pid) == "T", 30, what="the job to freeze its worker")
    frozen_at = time.time()
    rescuer = faults.worker(backend.url, name="rescuer", concurrency=1, lease=LEASE)

    rec = wait_until(lambda: succeeded(app, ref.id), 30, what="the rescuer to finish the job")
    rescued_after = time.time() - frozen_at
    assert json.loads(rec.result or "null") == rescuer.pid
    zombie.signal(signal.SIGCONT)
    # Two fences stop the woken worker; which acts first is up to the scheduler. Its job
    # thread may finish and send the late ack, which the storage refuses by token (an
    # ``ack_refused`` event); or its heartbeat thread runs first, learns the lease is gone and
    # drops the outcome before it is sent (it logs that). Either way the rescuer's outcome
    # stands, which is what is checked below.
    dropped = f"lost the lease of job {ref.id}"
    fence = wait_until(
        lambda: ("refused by the storage" if _refused(app, ref.id)
                 else "dropped by the worker" if dropped in zombie.output else None),
        15, what="the zombie's late outcome to be refused or dropped")
    wait_until(lambda: all(run.ended for run in faults.log.executions()[ref.id]), 10,
               what="the zombie's run to end")
    time.sleep(0.5)  # give a late ack time to arrive, if one were (wrongly) sent after a drop
    rec = app.get_job(ref.id)
    assert rec is not None

    assert rec.state is JobState.SUCCEEDED
    assert json.loads(rec.result or "null") == rescuer.pid, "the zombie overwrote the outcome"
    assert rec.recoveries == 1 and rec.errors == 0
    kinds = [e.kind for e in rec.events or ()]
    assert kinds.count(EventKind.SUCCEEDED) == 1
    runs = faults.log.executions()[ref.id]
    assert [run.pid for run in runs] == [zombie.pid, rescuer.pid]
    # The woken worker is healthy: it stops cleanly like any other.
    assert zombie.alive()
    zombie.signal(signal.SIGTERM)
    assert zombie.wait(timeout=15) == 0
    report("9 zombie (SIGSTOP > lease)", backend.name, rescued_after_s=rescued_after,
           late_ack=fence, outcome="rescuer's")
