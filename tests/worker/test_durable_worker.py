"""Durable jobs under a real worker (docs/durable.md, issue 55 item 2: "the job leaves the
worker and its slot"; item 4: "stop ... resumes at the last checkpoint"). Facts, never
timings: a job that sleeps an hour lets another run in the only slot; a stop hands a loop
back at the item it reached.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState, current_job
from conveyor.testing import drain
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.worker import process_jobs

pytestmark = pytest.mark.timeout(120)


def _until(check: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@contextmanager
def _running(app: Conveyor, config: WorkerConfig) -> Iterator[Launcher]:
    """A whole worker in this process while the block runs."""
    launcher = Launcher(app, config)
    launcher.start()
    try:
        yield launcher
    finally:
        launcher.stop(10)


def _state(app: Conveyor, job_id: str) -> JobState | None:
    record = app.get_job(job_id)
    return None if record is None else record.state


def test_a_sleeping_job_frees_its_slot(live_app: Conveyor) -> None:
    """Hatchet/Inngest durable sleep: with one slot, a job sleeping an hour does not keep the
    next job from running."""
    @live_app.job(name="t.napper")
    def napper() -> None:
        current_job().sleep(3600)

    @live_app.job(name="t.quick")
    def quick() -> str:
        return "ran"

    nap = napper.enqueue()
    with _running(live_app, WorkerConfig(concurrency=1, poll_interval=(0.02, 0.05))):
        _until(lambda: _state(live_app, nap.id) is JobState.SCHEDULED)
        after = quick.enqueue()
        _until(lambda: _state(live_app, after.id) is JobState.SUCCEEDED)
        assert _state(live_app, nap.id) is JobState.SCHEDULED


def test_a_suspended_job_is_promoted_when_due_not_an_interval_later(live_app: Conveyor
                                                                   ) -> None:
    """The poller is told when a job it suspended is due (``Poller.expect``): with a poll
    interval of ten minutes, a job sleeping a tenth of a second still finishes (the test's
    own limit, 30 s, would fail it if the poller waited for its interval)."""
    @live_app.job(name="t.short_nap")
    def short_nap() -> str:
        current_job().sleep(0.1)
        return "up"

    ref = short_nap.enqueue()
    with _running(live_app, WorkerConfig(concurrency=1, poll_interval=(600.0, 600.0))):
        _until(lambda: _state(live_app, ref.id) is JobState.SUCCEEDED)


def test_a_stop_hands_a_loop_back_at_the_item_it_reached(live_app: Conveyor) -> None:
    """Sidekiq iterable jobs: at shutdown the loop saves its cursor and the job goes back to
    the queue, to resume there; the stop does not wait for the whole loop."""
    reached = threading.Event()
    seen: list[int] = []

    @live_app.job(name="t.long_loop", retry=0)
    def long_loop() -> None:
        ctx = current_job()
        for item in ctx.iterate(range(50), every=1000):
            seen.append(item)
            if item == 20 and ctx.attempt == 1:
                reached.set()
                _until(lambda: ctx.stopping)  # held here until the worker begins to stop

    ref = long_loop.enqueue()
    launcher = Launcher(live_app, WorkerConfig(concurrency=2, poll_interval=(0.02, 0.05)))
    launcher.start()
    assert reached.wait(30)
    launcher.stop(30)
    record = live_app.get_job(ref.id)
    assert record is not None and record.state is JobState.PENDING
    assert record.errors == 0 and record.progress == (21, 50)
    drain(live_app)
    assert seen == list(range(50)) and _state(live_app, ref.id) is JobState.SUCCEEDED


@pytest.fixture
def proc_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Conveyor]:
    """The app of ``process_jobs`` on a SQLite file its job processes reach too."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    monkeypatch.setenv("CONVEYOR_URL", url)
    process_jobs.app.close()
    process_jobs.app.url = url
    yield process_jobs.app
    process_jobs.app.close()


def test_a_job_process_records_steps_and_suspends(proc_app: Conveyor) -> None:
    """The process executor runs durable calls through the job process's own store
    connection; the suspension crosses the pipe like any outcome."""
    ref = process_jobs.durable.enqueue(1)
    config = WorkerConfig(concurrency=1, heartbeat_interval=0.1, lease=5.0,
                          poll_interval=(0.02, 0.05), worker_id="proc-durable",
                          app="tests.worker.process_jobs:app")
    with _running(proc_app, config):
        _until(lambda: _state(proc_app, ref.id) is JobState.SCHEDULED)
    record = proc_app.get_job(ref.id)
    assert record is not None and record.message is not None
    assert record.message.startswith("sleeping until")
    steps = proc_app.storage.durable.read(ref.id).steps
    assert [s.name for s in steps] == ["pid", "sleep"]


@pytest.fixture(params=[pytest.param(("postgres", "amqp"), marks=pytest.mark.rabbitmq,
                                     id="postgres+amqp"),
                        pytest.param(("sqlite", "kafka"), marks=pytest.mark.kafka,
                                     id="sqlite+kafka")])
def brokered(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    """An app whose workers take jobs from a broker (issue 55 item 6: a resumed job is a
    delivery like any other); the lifecycle model runs durable jobs through RabbitMQ and the
    in-process broker on every store, this smoke run through Kafka too."""
    store, broker = request.param
    tag = uuid.uuid4().hex[:10]
    url = (f"sqlite:///{tmp_path}/b.db" if store == "sqlite" else
           f"{request.getfixturevalue('postgres_server').url}?schema=w{tag}")
    broker_url = (f"{request.getfixturevalue('rabbitmq_server').url}?prefix=w{tag}"
                  if broker == "amqp" else
                  request.getfixturevalue("kafka_server").broker_url(f"w{tag}"))
    app = Conveyor(url, broker=broker_url)
    try:
        yield app
    finally:
        app.close()


def test_a_durable_job_resumes_through_a_broker(brokered: Conveyor) -> None:
    """A step, a sleep, then a wait answered by an event: each resumption is published and
    delivered again, the step not run twice."""
    ran: list[str] = []

    @brokered.job(name="t.brokered_durable")
    def job() -> object:
        ctx = current_job()
        ctx.step("once", lambda: ran.append("once"))
        ctx.sleep(0.2)
        return ctx.wait_for("go", key="1", timeout=60)

    ref = job.enqueue()
    with _running(brokered, WorkerConfig(concurrency=2, poll_interval=(0.05, 0.1))):
        _until(lambda: (brokered.storage.durable.read(ref.id).wait is not None
                        and _state(brokered, ref.id) is JobState.SCHEDULED))
        assert brokered.send_event("go", key="1", data={"ok": True}) == 1
        _until(lambda: _state(brokered, ref.id) is JobState.SUCCEEDED)
    record = brokered.get_job(ref.id)
    assert record is not None and record.result == '{"ok":true}' and ran == ["once"]
