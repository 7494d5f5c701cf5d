"""Scenario 2: SIGTERM with a shutdown deadline. Jobs shorter than ``--timeout`` finish; jobs
longer are handed back at once (``interrupted``) and finished by the next worker. Nothing
is lost, nothing runs twice, and the worker exits by itself (never needs a SIGKILL)."""

from __future__ import annotations

import signal
import time

import pytest

from conveyor.core.job import EventKind, JobState
from tests.faults.checks import assert_batch_exact, enqueue_batch, states, wait_batch
from tests.faults.conftest import BACKENDS, Backend, Faults
from tests.faults.harness import report, wait_until

TIMEOUT = 2.0


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_sigterm_finishes_short_jobs_and_hands_back_long_ones(
    backend: Backend, faults: Faults
) -> None:
    """4 jobs of 0.8 s and 4 of 5 s on one worker with ``--timeout 2``; SIGTERM once all run."""
    app, jobs = faults.client(backend.url)
    items = [(800,)] * 4 + [(5000,)] * 4
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], items, "sigterm")
    short, long_ = ids[:4], ids[4:]
    first = faults.worker(backend.url, name="first", concurrency=8, timeout=TIMEOUT, lease=10)
    wait_until(lambda: faults.log.starts() == 8, 30, what="all eight jobs to start")

    term_at = time.monotonic()
    first.signal(signal.SIGTERM)
    code = first.wait(timeout=TIMEOUT + 10)
    stop_seconds = time.monotonic() - term_at
    handed_back = states(app, long_)
    # The long jobs are waiting again the moment the worker is gone, not after a lease.
    assert handed_back == {"pending": 4}, handed_back
    assert states(app, short) == {"succeeded": 4}
    assert code == 0, first.output
    # Deadline, then the hand-back: well under a second past --timeout (slack for CI).
    assert stop_seconds < TIMEOUT + 3

    faults.worker(backend.url, name="second", concurrency=8, timeout=TIMEOUT, lease=10)
    wait_batch(app, batch_id, timeout=40)
    assert_batch_exact(app, batch_id, {"succeeded": 8})
    runs = faults.log.executions()
    for job_id in short:
        assert len(runs[job_id]) == 1 and runs[job_id][0].ended is not None
    for job_id in long_:
        first_run, second_run = runs[job_id]  # exactly two executions: cut, then finished
        assert first_run.pid == first.pid and first_run.ended is None
        assert second_run.ended is not None
        rec = app.get_job(job_id)
        assert rec is not None and rec.state is JobState.SUCCEEDED
        kinds = [e.kind for e in rec.events or ()]
        assert kinds.count(EventKind.INTERRUPTED) == 1 and EventKind.RECOVERED not in kinds
        assert rec.errors == 0
    report(
        "2 SIGTERM, --timeout 2", backend.name, lost=0, run_twice=0,
        exit_after_term_s=stop_seconds, handed_back=4, sigkill_needed=False,
    )


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sigterm_when_idle_exits_at_once(backend: Backend, faults: Faults) -> None:
    """With nothing running, a stop is immediate: no waiting for the shutdown deadline."""
    app, jobs = faults.client(backend.url)
    batch_id, _ = enqueue_batch(app, jobs["faults.work"], [(10,)] * 20, "idle stop")
    worker = faults.worker(backend.url, name="idle", concurrency=4, timeout=20)
    wait_batch(app, batch_id, timeout=30)
    term_at = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=10) == 0
    stop_seconds = time.monotonic() - term_at
    assert stop_seconds < 5  # far below --timeout 20: it did not wait for the deadline
    report("2 SIGTERM when idle", backend.name, exit_after_term_s=stop_seconds)
