"""``app.schedules``: schedules added, changed, paused and removed at run time, and what a
running worker does with them from its next look (no restart, no deploy).

Expectations from the peers: BullMQ's ``upsertJobScheduler`` (a scheduler added or changed
from application code runs on the workers already running), Oban Pro's DynamicCron
(``insert``/``update``/``delete`` at run time; a job's own options apply to its entries), River's
``PeriodicJobs().Add`` on a running client, Hatchet's ``cron.create``.
"""

from __future__ import annotations

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.errors import ScheduleExists, ScheduleNotFound
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher


def _minute(clock: FakeClock) -> None:
    clock.advance(60 - clock.now() % 60 + 1)


def test_a_schedule_added_at_run_time_runs_on_a_running_worker_with_its_jobs_options(
        app: Conveyor, clock: FakeClock) -> None:
    @app.job(queue="mail", retry=3, timeout=20)
    def digest(kind: str, *, to: str) -> None: ...

    launcher = Launcher(app, WorkerConfig(concurrency=1))
    _minute(clock)
    assert launcher.cron.tick() == 0  # nothing stored yet
    info = app.schedules.add("mail-digest", "* * * * *", digest, args=["daily"],
                             kwargs={"to": "ops"}, by="test")
    assert (info.origin, info.queue, info.args, info.kwargs) == (
        "runtime", "mail", '["daily"]', '{"to":"ops"}')
    assert list(app.schedules) == []  # iterating gives the code's schedules only
    with pytest.raises(ScheduleExists):
        app.schedules.add("mail-digest", "0 * * * *", digest)
    clock.advance(60)
    assert launcher.cron.tick() == 1
    [job] = app.storage.list_jobs(state=JobState.PENDING)
    assert (job.name, job.queue, job.max_retries, job.timeout) == (digest.name, "mail", 3, 20)
    app.schedules.change("mail-digest", cron="*/2 * * * *", kwargs={"to": "team"})
    app.schedules.pause("mail-digest")
    clock.advance(240)
    assert launcher.cron.tick() == 0
    app.schedules.resume("mail-digest")
    app.schedules.remove("mail-digest")
    clock.advance(240)
    assert launcher.cron.tick() == 0
    assert [c.action for c in app.schedules.changes("mail-digest")] == [
        "removed", "resumed", "paused", "changed", "added"]
    assert app.schedules.changes()[0].by.startswith("app ")  # by default: this user and host
    for action in (app.schedules.pause, app.schedules.remove, app.schedules.get):
        with pytest.raises(ScheduleNotFound):
            action("mail-digest")


def test_an_edit_of_a_declared_schedule_survives_a_worker_restart(
        app: Conveyor, clock: FakeClock) -> None:
    @app.periodic("0 * * * *", name="hourly")
    def sync() -> None: ...

    Launcher(app, WorkerConfig(concurrency=1)).cron.register()
    app.schedules.change("hourly", cron="* * * * *")
    restarted = Launcher(app, WorkerConfig(concurrency=1))
    restarted.cron.register()
    assert app.schedules.get("hourly").cron == "* * * * *"
    _minute(clock)
    assert restarted.cron.tick() == 1  # the edited cron runs, every minute
    assert app.schedules.reset("hourly").cron == "0 * * * *"
    clock.advance(60)
    assert restarted.cron.tick() == 0


@pytest.mark.parametrize(("fields", "message"), [
    ({"cron": "61 * * * *"}, "invalid cron expression"),
    ({"tz": "Mars/Olympus"}, "unknown time zone"),
    ({"args": {"a": 1}}, "must be a JSON array"),
    ({"kwargs": {"when": object()}}, "not JSON"),
    ({"queue": "bad\nqueue"}, "queue"),
])
def test_bad_definitions_are_refused_before_anything_is_stored(
        app: Conveyor, fields: dict[str, object], message: str) -> None:
    app.schedules.add("ok", "* * * * *", "some.job")
    with pytest.raises(ValueError, match=message):
        app.schedules.change("ok", **fields)
    with pytest.raises(ValueError, match=message):
        app.schedules.add("other", **{"cron": "* * * * *", "job": "some.job", **fields})
    assert [s.name for s in app.schedules.stored()] == ["ok"]
    assert [c.action for c in app.schedules.changes()] == ["added"]
