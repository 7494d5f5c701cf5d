"""Background components driven one ``tick()`` at a time under a fake clock, on real storage."""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.client.periodic import Schedule
from conveyor.core.job import Ack, Outcome
from conveyor.storage.retention import Retention
from conveyor.worker.acker import Acker
from conveyor.worker.config import QueueWeight, WorkerConfig, parse_queue, queue_order
from conveyor.worker.heartbeat import Heartbeater
from conveyor.worker.inflight import Entry, InFlight
from conveyor.worker.janitor import Janitor
from conveyor.worker.launcher import Launcher
from conveyor.worker.poller import Poller
from conveyor.worker.processor import Processor
from conveyor.worker.recoverer import Recoverer
from tests.worker.helpers import lease_one


def _noop_app(app: Conveyor) -> None:
    @app.job(name="noop")
    def noop() -> None:
        return None


def test_parse_queue_reads_names_and_weights() -> None:
    assert parse_queue("critical,3") == QueueWeight("critical", 3)
    assert parse_queue("default") == QueueWeight("default", 1)
    for bad in ("", ",2", "q,x", "q,0"):
        try:
            parse_queue(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} must be refused")


def test_weighted_queue_order_prefers_heavier_queues_and_strict_keeps_order() -> None:
    queues = (QueueWeight("critical", 3), QueueWeight("default", 1))
    rng = random.Random(7)
    firsts = Counter(queue_order(queues, False, rng)[0] for _ in range(4000))
    assert 2700 < firsts["critical"] < 3300  # about 3 in 4
    assert all(sorted(queue_order(queues, False, rng)) == ["critical", "default"]
               for _ in range(20))
    assert queue_order(queues, True) == ["critical", "default"]


def test_poller_promotes_due_scheduled_jobs(app: Conveyor, clock: FakeClock,
                                            config: WorkerConfig) -> None:
    _noop_app(app)
    ref = app.registry.get("noop").enqueue_in(30)  # type: ignore[union-attr]
    poller = Poller(app.storage, clock, config)
    poller.tick()
    assert app.get_job(ref.id).state is JobState.SCHEDULED  # type: ignore[union-attr]
    clock.advance(31)
    poller.tick()
    assert app.get_job(ref.id).state is JobState.PENDING  # type: ignore[union-attr]
    assert 0.5 <= poller.interval() <= 1.0


def test_recoverer_puts_back_jobs_of_a_dead_worker(app: Conveyor, clock: FakeClock,
                                                   config: WorkerConfig) -> None:
    _noop_app(app)
    ref = app.registry.get("noop").enqueue()  # type: ignore[union-attr]
    app.storage.dequeue(["default"], "dead-worker", 1, config.lease)
    recoverer = Recoverer(app.storage, clock, config)
    recoverer.tick()
    assert app.get_job(ref.id).state is JobState.ACTIVE  # type: ignore[union-attr]
    clock.advance(config.lease + 1)
    recoverer.tick()
    record = app.get_job(ref.id)
    assert record is not None and record.state is JobState.PENDING
    assert record.errors == 0 and record.recoveries == 1
    assert any(e.kind == "recovered" for e in record.events or [])


def _running(app: Conveyor, clock: FakeClock, inflight: InFlight) -> Entry:
    entry = lease_one(app, Processor(app, "test-worker", clock))
    assert isinstance(entry, Entry)
    inflight.add(entry)
    return entry


def test_heartbeat_keeps_leases_alive_while_the_job_runs(
    app: Conveyor, clock: FakeClock, config: WorkerConfig
) -> None:
    _noop_app(app)
    app.registry.get("noop").enqueue()  # type: ignore[union-attr]
    inflight = InFlight(config.concurrency)
    entry = _running(app, clock, inflight)
    beat = Heartbeater(app.storage, clock, config, inflight=inflight)
    recoverer = Recoverer(app.storage, clock, config)
    for _ in range(20):  # 40 s, four leases long
        clock.advance(config.heartbeat_interval)
        beat.tick()
        recoverer.tick()
    assert app.get_job(entry.job.id).state is JobState.ACTIVE  # type: ignore[union-attr]
    assert [w.id for w in app.storage.workers()] == ["test-worker"]
    assert app.storage.workers()[0].busy[0].job_id == entry.job.id


def test_heartbeat_extends_leases_of_acks_not_yet_written(
    app: Conveyor, clock: FakeClock, config: WorkerConfig
) -> None:
    _noop_app(app)
    app.registry.get("noop").enqueue()  # type: ignore[union-attr]
    [job] = app.storage.dequeue(["default"], "test-worker", 1, config.lease)
    acker = Acker(app.storage, clock, config)
    acker.add(Ack(job.id, job.token, Outcome.SUCCEEDED, result="null"))
    beat = Heartbeater(app.storage, clock, config, inflight=InFlight(1), acker=acker)
    clock.advance(config.lease - 1)
    beat.tick()
    clock.advance(config.lease - 1)
    Recoverer(app.storage, clock, config).tick()
    assert acker.tick() == 1 and acker.refused == 0
    assert app.get_job(job.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_heartbeat_reports_lost_leases_and_cancellations(
    app: Conveyor, clock: FakeClock, config: WorkerConfig
) -> None:
    _noop_app(app)
    noop = app.registry.get("noop")
    assert noop is not None
    noop.enqueue()
    inflight = InFlight(config.concurrency)
    first = _running(app, clock, inflight)
    beat = Heartbeater(app.storage, clock, config, inflight=inflight)
    # the first lease runs out and another worker gets the job
    clock.advance(config.lease + 1)
    Recoverer(app.storage, clock, config).tick()
    assert app.storage.dequeue(["default"], "other", 1, config.lease)[0].id == first.job.id
    noop.enqueue()
    second = _running(app, clock, inflight)
    app.cancel(second.job.id)
    beat.tick()
    assert first.lost and not second.lost
    assert second.ctx.cancelled


def test_a_job_whose_lease_the_heartbeat_found_lost_is_not_acknowledged(
    app: Conveyor, clock: FakeClock, config: WorkerConfig
) -> None:
    """The lost-lease cancel request must never become a CANCELLED outcome: the worker drops
    the outcome, and the recovered job stays pending to run again."""
    _noop_app(app)
    app.registry.get("noop").enqueue()  # type: ignore[union-attr]
    launcher = Launcher(app, config, clock)
    late = _running(app, clock, launcher.inflight)
    clock.advance(config.lease + 1)
    Recoverer(app.storage, clock, config).tick()
    launcher.heartbeat.tick()
    assert late.lost and late.ctx.cancelled
    launcher.finish(late, launcher.processor.success(late, None))
    assert launcher.acker.tick() == 0 and launcher.acker.refused == 0
    record = app.get_job(late.job.id)
    assert record is not None and record.state is JobState.PENDING and record.recoveries == 1


def test_a_rerun_leased_while_its_old_ack_waits_is_not_reported_lost(
    app: Conveyor, clock: FakeClock, config: WorkerConfig
) -> None:
    """An ack that could not be written (outage) for a lease that ran out, and the same job
    recovered and leased to this process again: the heartbeat extends the live lease and
    does not mark the live run lost (which would drop its outcome and run it once more)."""
    _noop_app(app)
    app.registry.get("noop").enqueue()  # type: ignore[union-attr]
    launcher = Launcher(app, config, clock)
    old = _running(app, clock, launcher.inflight)
    assert launcher.inflight.claim(old)  # it finished; its ack waits in the acker
    launcher.acker.add(Ack(old.job.id, old.job.token, Outcome.SUCCEEDED))
    clock.advance(config.lease + 1)
    Recoverer(app.storage, clock, config).tick()
    again = _running(app, clock, launcher.inflight)
    assert again.job.id == old.job.id and again.job.token != old.job.token
    launcher.heartbeat.tick()
    assert not again.lost and not again.ctx.cancelled
    clock.advance(config.lease - 1)
    Recoverer(app.storage, clock, config).tick()  # the live lease was extended: not reclaimed
    record = app.get_job(again.job.id)
    assert record is not None and record.state is JobState.ACTIVE and record.recoveries == 1


def test_heartbeat_passes_remote_commands_on(app: Conveyor, clock: FakeClock,
                                            config: WorkerConfig) -> None:
    received: list[str] = []
    beat = Heartbeater(app.storage, clock, config, inflight=InFlight(1),
                       on_command=received.append)
    beat.tick()
    assert app.storage.command_worker("test-worker", "quiet")
    beat.tick()
    beat.tick()  # a command is consumed once
    assert received == ["quiet"]


def test_janitor_trims_finished_jobs_past_retention(app: Conveyor, clock: FakeClock,
                                                   config: WorkerConfig) -> None:
    _noop_app(app)
    ref = app.registry.get("noop").enqueue()  # type: ignore[union-attr]
    [job] = app.storage.dequeue(["default"], "w", 1, 10)
    app.storage.ack([Ack(job.id, job.token, Outcome.SUCCEEDED, result="null")])
    janitor = Janitor(app.storage, clock, config, retention=Retention(succeeded_seconds=60))
    janitor.tick()
    assert app.get_job(ref.id) is not None
    clock.advance(61)
    janitor.tick()  # past retention, but the next trim pass is not due yet
    assert app.get_job(ref.id) is not None
    clock.advance(config.janitor_interval)
    janitor.tick()
    assert app.get_job(ref.id) is None


def test_janitor_tidies_at_every_tick_and_trims_every_janitor_interval(
        app: Conveyor, clock: FakeClock) -> None:
    """Tidying (``Storage.tidy``) is cheap when there is nothing to do and must come soon
    when there is: each second. Trimming walks every kind of row: every few minutes."""
    calls: list[str] = []

    class Spy:
        def trim(self, retention: Retention) -> int:
            calls.append("trim")
            return 0

        def tidy(self) -> bool:
            calls.append("tidy")
            return False

    config = WorkerConfig(janitor_interval=10.0, tidy_interval=1.0)
    janitor = Janitor(Spy(), clock, config)  # type: ignore[arg-type]
    assert janitor.interval() == 1.0
    for _ in range(12):
        janitor.tick()
        clock.advance(janitor.interval())
    assert calls.count("tidy") == 12 and calls.count("trim") == 2
    assert calls[:3] == ["trim", "tidy", "tidy"] and calls[11:13] == ["trim", "tidy"]
    clock.advance(7.5)  # the next trim is due in half a second: the wait is that long
    assert janitor.interval() == 0.5


def test_acker_keeps_acks_when_the_write_fails(app: Conveyor, clock: FakeClock,
                                              config: WorkerConfig) -> None:
    _noop_app(app)
    app.registry.get("noop").enqueue()  # type: ignore[union-attr]
    [job] = app.storage.dequeue(["default"], "w", 1, 10)

    class Down:
        def ack(self, acks: object) -> list[bool]:
            raise ConnectionError("storage down")

    acker = Acker(Down(), clock, config)  # type: ignore[arg-type]
    acker.add(Ack(job.id, job.token, Outcome.SUCCEEDED, result="1"))
    assert acker.tick() == 0
    assert acker.leases() == {job.id: job.token}
    acker.storage = app.storage
    assert acker.tick() == 1 and len(acker) == 0
    assert app.get_job(job.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_the_launcher_runs_the_apps_periodic_schedules(app: Conveyor, clock: FakeClock) -> None:
    _noop_app(app)
    app.schedules.declare(Schedule("every-minute", "* * * * *", "noop"))
    launcher = Launcher(app, WorkerConfig(concurrency=1))
    assert launcher.cron.tick() == 0  # registers it: no tick from before it existed
    clock.advance(60)
    assert launcher.cron.tick() == 1
    assert launcher.cron.tick() == 0  # the same ticks are never enqueued twice
    clock.advance(60)
    assert launcher.cron.tick() == 1
    assert all(r.name == "noop" for r in app.storage.list_jobs(state=JobState.PENDING))


def test_an_outage_is_one_warning_line_until_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    """A component whose storage or broker is out says so once per outage, in one line
    without a traceback, and once more when it works again — not a traceback every tick."""
    from conveyor.errors import BrokerUnavailable, StorageUnavailable
    from conveyor.worker.component import PeriodicComponent

    failures: list[Exception] = [BrokerUnavailable("broker down"), BrokerUnavailable("still"),
                                 StorageUnavailable("store down")]

    class Flaky(PeriodicComponent):
        name = "flaky"

        def tick(self) -> None:
            if failures:
                raise failures.pop(0)

        def interval(self) -> float:
            return 0.05

    app = Conveyor("memory://")
    flaky = Flaky(app.storage, app.clock, WorkerConfig())
    with caplog.at_level(logging.INFO, logger="conveyor.worker"):
        assert [flaky.safe_tick() for _ in range(5)] == [False, False, False, True, True]
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [(logging.WARNING, "flaky: broker down (trying again until it answers)"),
                     (logging.WARNING, "flaky: store down (trying again until it answers)"),
                     (logging.INFO, "flaky: working again")]
    assert all(r.exc_info is None for r in caplog.records)
