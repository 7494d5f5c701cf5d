"""A job recovered from a crashed worker (a suspect) never runs beside another suspect, while
every other slot keeps running normal jobs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from conveyor import Conveyor, FakeClock, JobState
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from conveyor.worker.recoverer import Recoverer
from tests.worker.backends import every_backend_app  # noqa: F401 (the ``app`` fixture)


def _until(ready: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    return ready()


def _recover(app: Conveyor, clock: FakeClock, config: WorkerConfig, count: int) -> None:
    """A worker leased ``count`` jobs and died; the recoverer puts them back."""
    assert len(app.storage.dequeue(["default"], "crashed", count, config.lease)) == count
    clock.advance(config.lease + 1)
    Recoverer(app.storage, clock, config).tick()


def test_normal_jobs_keep_running_while_a_suspect_runs(app: Conveyor, clock: FakeClock) -> None:
    gate = threading.Event()
    ran: list[str] = []

    @app.job(name="slow")
    def slow() -> None:
        gate.wait(10)

    @app.job(name="step")
    def step(n: int) -> int:
        ran.append(f"step {n}")
        return n

    suspect = slow.enqueue()
    config = WorkerConfig(concurrency=4, worker_id="survivor")
    _recover(app, clock, config, 1)
    for n in range(6):
        step.enqueue(n)
    launcher = Launcher(app, config, clock)
    launcher.threads.start()
    try:
        assert launcher.fetcher.tick() == 4  # the suspect and three normal jobs, all run
        assert _until(lambda: len(ran) == 3)
        assert launcher.fetcher.tick() == 3  # the suspect still runs: the others go on
        assert _until(lambda: len(ran) == 6)
        assert app.get_job(suspect.id).state is JobState.ACTIVE  # type: ignore[union-attr]
        gate.set()
        assert _until(lambda: len(launcher.inflight) == 0)
        launcher.acker.flush(5.0)
        assert app.get_job(suspect.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    finally:
        gate.set()
        launcher.threads.stop()


def test_two_suspects_never_run_together(app: Conveyor, clock: FakeClock) -> None:
    gate = threading.Event()
    running: list[int] = []

    @app.job(name="slow")
    def slow(n: int) -> None:
        running.append(n)
        gate.wait(10)

    refs = [slow.enqueue(n) for n in range(2)]
    config = WorkerConfig(concurrency=4, worker_id="survivor")
    _recover(app, clock, config, 2)
    launcher = Launcher(app, config, clock)
    launcher.threads.start()
    try:
        assert launcher.fetcher.tick() == 2
        # the second suspect was handed back, and written, before the first one started
        states = {r.id: app.get_job(r.id).state for r in refs}  # type: ignore[union-attr]
        assert sorted(states.values()) == [JobState.ACTIVE, JobState.PENDING]
        assert _until(lambda: len(running) == 1)
        assert launcher.fetcher.tick() == 1  # fetched again, handed back again: not run
        time.sleep(0.05)
        assert len(running) == 1 and len(launcher.inflight) == 1
        gate.set()
        assert _until(lambda: len(launcher.inflight) == 0)
        assert launcher.fetcher.tick() == 1  # the first one ended: the second may run now
        assert _until(lambda: len(running) == 2)
    finally:
        gate.set()
        launcher.threads.stop()

