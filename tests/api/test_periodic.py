"""``@app.periodic``: registration, validation, and what a worker's scheduler does with it."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.client.periodic import Schedule
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.launcher import Launcher


def test_periodic_registers_the_job_and_its_schedule(app: Conveyor) -> None:
    @app.periodic("*/5 * * * *", tz="Europe/Berlin", args=(7,), queue="reports", retry=2)
    def nightly(seller_id: int) -> None: ...

    [schedule] = app.schedules
    assert app.registry.get(nightly.name) is nightly
    assert (schedule.name, schedule.cron, schedule.tz, schedule.queue, schedule.args,
            schedule.max_retries) == (nightly.name, "*/5 * * * *", "Europe/Berlin", "reports",
                                      (7,), 2)


def test_periodic_on_a_job_keeps_its_options_and_may_be_named(app: Conveyor) -> None:
    @app.periodic("0 * * * *", name="hourly-sync")
    @app.job(queue="sync", retry=False)
    def sync() -> None: ...

    [schedule] = app.schedules
    assert (schedule.name, schedule.job_name, schedule.queue, schedule.max_retries) == (
        "hourly-sync", sync.name, "sync", 0)
    with pytest.raises(ValueError, match="already exists"):
        app.periodic("5 * * * *", name="hourly-sync")(sync)


def test_periodic_queue_and_job_options_reach_every_tick(app: Conveyor) -> None:
    @app.periodic("*/5 * * * *", queue="reports", args=(7,), timeout=30, expires_in=120,
                  concurrency=1, concurrency_key=lambda seller_id: f"seller:{seller_id}")
    def refresh(seller_id: int) -> None: ...

    [schedule] = app.schedules
    assert refresh.opts.queue == "reports"  # a job it registers gets the queue too
    spec = schedule.spec(1_700_000_100.0, unique_for=600)
    assert (spec.queue, spec.timeout, spec.deadline) == ("reports", 30, 1_700_000_220.0)
    assert spec.flow is not None
    assert (spec.flow.concurrency_key, spec.flow.concurrency_limit) == ("seller:7", 1)
    assert (spec.flow.unique_key, spec.flow.unique_for) == ("periodic:" + schedule.name
                                                            + ":1700000100", 600)


def test_periodic_on_an_existing_job_may_move_its_ticks_but_not_its_options(
        app: Conveyor) -> None:
    @app.job(queue="sync", concurrency=1)
    def sync() -> None: ...

    app.periodic("0 * * * *", name="hourly", queue="urgent")(sync)
    assert (app.schedules[0].queue, sync.opts.queue) == ("urgent", "sync")
    with pytest.raises(TypeError, match=r"already a job.*\(retry, timeout\)"):
        app.periodic("0 * * * *", name="other", retry=3, timeout=5)(sync)
    assert [s.name for s in app.schedules] == ["hourly"]


def test_ticks_follow_the_time_zone_across_daylight_saving() -> None:
    berlin = Schedule("b", "0 3 * * *", "j", tz="Europe/Berlin")
    # 2030-03-30 .. 2030-04-01: Berlin moves from UTC+1 to UTC+2 on the 31st at 02:00
    start = datetime(2030, 3, 30, tzinfo=timezone.utc).timestamp()
    ticks = berlin.ticks_between(start, start + 3 * 86400)
    assert [datetime.fromtimestamp(t, timezone.utc).strftime("%d %H:%M") for t in ticks] == [
        "30 02:00", "31 01:00", "01 01:00"]


@pytest.mark.parametrize(("cron", "tz", "message"), [
    ("61 * * * *", "UTC", "invalid cron expression"),
    ("every minute", "UTC", "invalid cron expression"),
    ("* * * * *", "Mars/Olympus", "unknown time zone"),
])
def test_periodic_refuses_bad_cron_and_time_zones(app: Conveyor, cron: str, tz: str,
                                                  message: str) -> None:
    with pytest.raises(ValueError, match=message):
        app.periodic(cron, tz=tz)


def test_a_worker_registers_runs_and_honours_a_pause(app: Conveyor, clock: FakeClock) -> None:
    @app.periodic("* * * * *")
    def ping() -> None: ...

    launcher = Launcher(app, WorkerConfig(concurrency=1))
    launcher.cron.register()
    [info] = app.storage.schedules()
    assert (info.name, info.paused, info.last_tick) == (ping.name, False, None)
    assert launcher.cron.tick() == 0  # no tick from before the schedule existed
    clock.advance(60)
    assert launcher.cron.tick() == 1
    assert app.storage.schedules()[0].last_tick is not None
    app.storage.pause_schedule(ping.name)
    clock.advance(120)
    assert launcher.cron.tick() == 0
    app.storage.resume_schedule(ping.name)
    clock.advance(60)
    assert launcher.cron.tick() == 1
    assert {r.name for r in app.storage.list_jobs(state=JobState.PENDING)} == {ping.name}


def test_a_worker_warns_once_when_ticks_go_to_a_queue_nobody_listens_to(
        app: Conveyor, caplog: pytest.LogCaptureFixture) -> None:
    @app.periodic("* * * * *", queue="reports")
    def nightly() -> None: ...

    @app.periodic("*/5 * * * *", queue="default")
    def tidy() -> None: ...

    caplog.set_level(logging.INFO, logger="conveyor")
    launcher = Launcher(app, WorkerConfig(concurrency=1, queues=(QueueWeight("default"),)))
    launcher.start()
    launcher.stop(5)
    [warning] = [r.getMessage() for r in caplog.records if "periodic ticks" in r.getMessage()]
    assert f"queue 'reports' (schedules: {nightly.name})" in warning
    assert "-q reports" in warning and "'default'" not in warning
    caplog.clear()
    listening = Launcher(app, WorkerConfig(concurrency=1, queues=(
        QueueWeight("default"), QueueWeight("reports"))))
    listening.start()
    listening.stop(5)
    assert not [r for r in caplog.records if "periodic ticks" in r.getMessage()]
