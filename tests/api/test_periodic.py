"""``@app.periodic``: registration, validation, and what a worker's scheduler does with it."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.worker.config import WorkerConfig
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
    assert launcher.cron.tick() >= 1
    assert app.storage.schedules()[0].last_tick is not None
    app.storage.pause_schedule(ping.name)
    clock.advance(120)
    assert launcher.cron.tick() == 0
    app.storage.resume_schedule(ping.name)
    clock.advance(60)
    assert launcher.cron.tick() == 1
    assert {r.name for r in app.storage.list_jobs(state=JobState.PENDING)} == {ping.name}
