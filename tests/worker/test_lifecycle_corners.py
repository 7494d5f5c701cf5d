"""The worker's lifecycle corners (issue #15), driven tick by tick on every backend.

Each test runs a real ``Launcher``'s components by hand under a fake clock, on memory, a
SQLite file and a real redis-server, and checks the job record the storage ends with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from conveyor import Conveyor, Fail, FakeClock, JobState
from conveyor.client.context import current_job
from conveyor.core.job import EventKind
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.worker.backends import every_backend_app  # noqa: F401 (the ``app`` fixture)


def _until(ready: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait (in real time, for a pool thread) until ``ready()``; fail with ``what``."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def launcher(app: Conveyor, clock: FakeClock) -> Iterator[Launcher]:
    """A launcher whose components the test ticks by hand (only the pool threads run)."""
    launcher = Launcher(app, WorkerConfig(concurrency=2, worker_id="corner"), clock)
    launcher.threads.start()
    try:
        yield launcher
    finally:
        launcher.threads.stop()


def test_a_timed_out_attempt_is_one_error_and_its_retry_keeps_its_own_outcome(
    app: Conveyor, clock: FakeClock, launcher: Launcher
) -> None:
    """The abandoned thread of attempt 1 ends while attempt 2 runs in the same process: it
    must not take attempt 2's place (attempt 2's outcome recorded, never "recovered")."""
    gates = {1: threading.Event(), 2: threading.Event()}
    running: list[int] = []
    threads: dict[int, threading.Thread] = {}

    @app.job(name="slow", retry=1, timeout=1, retry_in=lambda attempt, exc: 0)
    def slow() -> str:
        attempt = current_job().attempt
        threads[attempt] = threading.current_thread()
        running.append(attempt)
        gates[attempt].wait(10)
        return f"attempt {attempt}"

    ref = slow.enqueue()
    assert launcher.fetcher.tick() == 1
    _until(lambda: running == [1], "attempt 1 to start")
    clock.advance(1.5)
    launcher.watchdog.tick()  # attempt 1 timed out: its thread is abandoned
    assert launcher.acker.tick() == 1
    record = app.get_job(ref.id)
    assert record is not None and record.state is JobState.RETRYING and record.errors == 1
    assert record.message is not None and "timeout" in record.message

    launcher.poller.tick()
    assert launcher.fetcher.tick() == 1
    _until(lambda: running == [1, 2], "attempt 2 to start")
    gates[1].set()  # the abandoned attempt 1 ends now, while attempt 2 still runs
    threads[1].join(10)  # it handed its late outcome to the launcher and exited
    assert not threads[1].is_alive()
    launcher.heartbeat.tick()
    gates[2].set()
    _until(lambda: len(launcher.inflight) == 0, "attempt 2 to end")
    launcher.acker.flush(5.0)

    clock.advance(60)  # well past any lease: nothing may be recovered
    launcher.recoverer.tick()
    record = app.get_job(ref.id)
    assert record is not None and record.events is not None
    assert record.state is JobState.SUCCEEDED, record.state
    assert record.result == '"attempt 2"' and record.attempt == 2 and record.errors == 1
    kinds = [e.kind for e in record.events]
    assert EventKind.RECOVERED not in kinds and EventKind.ACK_REFUSED not in kinds
    assert kinds.count(EventKind.ERROR) == 1


def test_a_cancel_sticks_when_the_job_raises_before_the_next_heartbeat(
    app: Conveyor, clock: FakeClock, launcher: Launcher
) -> None:
    """Cancelled while running, the job raises before any heartbeat passed the request on:
    it ends cancelled, and is never retried."""
    gate = threading.Event()
    runs: list[int] = []

    @app.job(name="flaky", retry=3, retry_in=lambda attempt, exc: 0)
    def flaky() -> None:
        runs.append(current_job().attempt)
        gate.wait(10)
        raise RuntimeError("upstream said no")

    ref = flaky.enqueue()
    assert launcher.fetcher.tick() == 1
    _until(lambda: runs == [1], "the job to start")
    assert app.cancel(ref.id) is JobState.ACTIVE
    gate.set()
    _until(lambda: len(launcher.inflight) == 0, "the job to raise")
    launcher.acker.flush(5.0)
    launcher.poller.tick()
    assert launcher.fetcher.tick() == 0
    record = app.get_job(ref.id)
    assert record is not None
    assert record.state is JobState.CANCELLED and record.errors == 1 and runs == [1]
    assert record.message == "cancelled: RuntimeError: upstream said no"


@pytest.mark.parametrize("ending", ["raise", "timeout", "fail"])
def test_an_attempt_that_ends_after_the_job_was_told_to_stop_is_recorded_as_it_ended(
    app: Conveyor, clock: FakeClock, launcher: Launcher, ending: str
) -> None:
    """The heartbeat passed the cancel request on (``ctx.cancelled``) before the job raised,
    timed out or failed: the record is the same as when the request had not reached it yet —
    an error still counts and is kept (``cancelled: <error>``), a ``Fail`` still stands."""
    gate, started = threading.Event(), threading.Event()
    told: list[bool] = []

    @app.job(name="told", retry=3, timeout=5, retry_in=lambda attempt, exc: 0)
    def told_to_stop() -> None:
        started.set()
        gate.wait(10)
        told.append(current_job().cancelled)
        if ending == "fail":
            raise Fail("not today")
        raise RuntimeError("upstream said no")

    ref = told_to_stop.enqueue()
    assert launcher.fetcher.tick() == 1
    assert started.wait(10)
    assert app.cancel(ref.id) is JobState.ACTIVE
    launcher.heartbeat.tick()  # the job sees ctx.cancelled now
    if ending == "timeout":
        clock.advance(6)
        launcher.watchdog.tick()
    gate.set()
    _until(lambda: len(launcher.inflight) == 0 and bool(told), "the attempt to end")
    launcher.acker.flush(5.0)
    record = app.get_job(ref.id)
    assert record is not None and told == [True]
    if ending == "fail":
        assert (record.state, record.errors, record.message) == (
            JobState.FAILED, 0, "not today")
    elif ending == "raise":
        assert (record.state, record.errors, record.message) == (
            JobState.CANCELLED, 1, "cancelled: RuntimeError: upstream said no")
    else:
        assert (record.state, record.errors, record.message) == (
            JobState.CANCELLED, 1,
            "cancelled: JobTimeout: job told ran longer than its timeout of 5s")
