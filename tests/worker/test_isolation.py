"""Jobs recovered from a crashed worker run alone, so a poison job cannot take others down."""

from __future__ import annotations

import threading
import time

from conveyor import Conveyor, FakeClock, JobState
from conveyor.job import Outcome
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from conveyor.worker.recoverer import Recoverer


def test_a_fetch_with_a_recovered_job_keeps_only_that_one_and_runs_it_alone(
    app: Conveyor, clock: FakeClock
) -> None:
    ran: list[int] = []

    @app.job(name="step")
    def step(n: int) -> int:
        ran.append(n)
        return n

    refs = [step.enqueue(n) for n in range(3)]
    config = WorkerConfig(concurrency=4, worker_id="survivor")
    # a worker leased all three, then died
    assert len(app.storage.dequeue(["default"], "crashed", 3, config.lease)) == 3
    clock.advance(config.lease + 1)
    Recoverer(app.storage, clock, config).tick()

    launcher = Launcher(app, config)
    fetcher, isolation = launcher.fetcher, launcher.fetcher.isolation
    assert fetcher.tick() == 3
    assert isolation.held is not None and len(launcher.inflight) == 1
    handed_back = [launcher.acker._pending[i] for i in range(2)]
    assert {a.outcome for a in handed_back} == {Outcome.INTERRUPTED}
    assert launcher.acker.tick() == 2
    held_id = isolation.held.job.id
    others = [r.id for r in refs if r.id != held_id]
    for job_id in others:
        record = app.get_job(job_id)
        assert record is not None and record.state is JobState.PENDING and record.errors == 0

    launcher.threads.start()
    try:
        isolation.advance(0.0)  # only the held job is here: it starts
        assert isolation.alone is not None and isolation.held is None
        deadline = time.monotonic() + 5
        while isolation.active and time.monotonic() < deadline:
            isolation.advance(0.05)
        assert not isolation.active and len(ran) == 1
        launcher.acker.tick()
        assert app.get_job(held_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    finally:
        launcher.threads.stop()


def test_stopping_hands_a_held_job_back_at_once(app: Conveyor, clock: FakeClock) -> None:
    @app.job(name="noop")
    def noop() -> None:
        return None

    ref = noop.enqueue()
    config = WorkerConfig(concurrency=2, worker_id="survivor")
    app.storage.dequeue(["default"], "crashed", 1, config.lease)
    clock.advance(config.lease + 1)
    Recoverer(app.storage, clock, config).tick()
    launcher = Launcher(app, config)
    assert launcher.fetcher.tick() == 1 and launcher.fetcher.isolation.held is not None
    launcher.fetcher.isolation.release()
    assert len(launcher.inflight) == 0 and launcher.acker.tick() == 1
    record = app.get_job(ref.id)
    assert record is not None and record.state is JobState.PENDING and record.recoveries == 1


def test_a_recovered_job_starts_only_after_the_hand_backs_are_written(
    app: Conveyor, clock: FakeClock
) -> None:
    """The -c 4 poison bug: the suspect started while the hand-backs of its fetch still sat on
    the acker; when it killed the process, those jobs were recovered with it, again and again,
    and went dead without ever running."""
    seen: list[dict[str, str]] = []

    @app.job(name="look")
    def look(n: int) -> None:
        if n == 0:  # the suspect: what is the storage's state of the others right now?
            seen.append({r.id: r.state.value for r in app.storage.list_jobs(limit=10)
                         if r.id != refs[0].id})

    refs = [look.enqueue(n) for n in range(4)]
    config = WorkerConfig(concurrency=4, worker_id="survivor")
    [first] = app.storage.dequeue(["default"], "crashed", 1, config.lease)
    assert first.id == refs[0].id
    clock.advance(config.lease + 1)
    Recoverer(app.storage, clock, config).tick()

    launcher = Launcher(app, config)
    isolation = launcher.fetcher.isolation
    assert launcher.fetcher.tick() == 4
    assert isolation.held is not None and isolation.held.job.id == refs[0].id
    assert len(launcher.acker) == 3  # the hand-backs, not yet written
    launcher.threads.start()
    # The acker is slow to start (a busy machine): the suspect must wait for it.
    late_acker = threading.Timer(0.3, launcher.acker.start)
    late_acker.start()
    try:
        isolation.advance(0.0)
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [{r.id: "pending" for r in refs[1:]}]
    finally:
        late_acker.join()
        launcher.threads.stop()
        launcher.acker.stop()
