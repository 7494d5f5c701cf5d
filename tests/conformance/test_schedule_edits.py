"""Schedules at run time on every store: add, change, pause, resume, remove and reset, each
with its audit entry (who, what, when) in the same step; the code's declarations synced at
worker start under "the stored edit wins"; and still exactly one job per tick when schedules
change while four schedulers run on four connections.

Expectations from the peers: Oban Pro's DynamicCron (insert, update, pause and delete entries
at run time, shared by the whole cluster; runtime changes to an entry persist), BullMQ's
``upsertJobScheduler`` / ``removeJobScheduler`` (one scheduler per id, upserted), River's
periodic jobs and Hatchet's crons (created and deleted through the API while workers run).
"""

from __future__ import annotations

import threading

import pytest

from conveyor.client.options import JobOptions
from conveyor.client.periodic import CronConfig, CronScheduler, Schedule, check_definition
from conveyor.core.clock import FakeClock
from conveyor.errors import ScheduleExists, ScheduleNotFound
from conveyor.storage import Backend
from conveyor.storage.schedule_edits import CHANGES_KEPT
from conveyor.storage.schedule_records import ScheduleInfo
from tests.conformance.helpers import (
    connections,
    periodic_ticks,
    run_in_threads,
    to_next_minute,
)

REPORT = Schedule("report", "*/5 * * * *", "tests.report", queue="cron", args=(7,))
JOBS = {"tests.report": JobOptions(queue="cron"), "tests.ping": JobOptions(queue="cron")}


def _runtime(name: str, cron: str, job: str = "tests.ping", **fields: object) -> ScheduleInfo:
    checked = check_definition({"cron": cron, "tz": "UTC", "job_name": job, "queue": "cron",
                                "args": [], "kwargs": {}, **fields})
    return ScheduleInfo(name, **checked)  # type: ignore[arg-type]






def test_added_changed_paused_resumed_and_removed_each_with_one_audit_entry(
        backend: Backend, clock: FakeClock) -> None:
    added_at = clock.now()
    stored = backend.add_schedule(_runtime("ping", "* * * * *", args=[1]), by="cli ada@h1")
    assert (stored.origin, stored.created_at, stored.args, stored.edited) == (
        "runtime", added_at, "[1]", False)
    with pytest.raises(ScheduleExists):
        backend.add_schedule(_runtime("ping", "0 * * * *"), by="cli bob@h2")
    clock.advance(5)
    changed = backend.change_schedule("ping", {"cron": "*/2 * * * *", "kwargs": '{"a":1}'},
                                      by="dashboard 10.0.0.7")
    assert (changed.cron, changed.kwargs, changed.changed_at) == (
        "*/2 * * * *", '{"a":1}', clock.now())
    assert backend.change_schedule("ping", {"cron": "*/2 * * * *"}, by="x") == changed
    with pytest.raises(ScheduleNotFound):
        backend.change_schedule("nope", {"cron": "* * * * *"}, by="x")
    clock.advance(5)
    assert backend.pause_schedule("ping", by="app bob@h2") is True
    assert backend.pause_schedule("ping", by="app bob@h2") is True  # no change: no entry
    clock.advance(5)
    assert backend.resume_schedule("ping", by="app bob@h2") is True
    assert [s.name for s in backend.schedules()] == ["ping"]
    clock.advance(5)
    removed = backend.remove_schedule("ping", by="cli ada@h1")
    assert removed is not None and removed.cron == "*/2 * * * *"
    assert backend.remove_schedule("ping", by="cli ada@h1") is None
    assert backend.schedules() == []
    changes = backend.schedule_changes()
    assert [(c.action, c.by, c.at - added_at) for c in changes] == [
        ("removed", "cli ada@h1", 20.0), ("resumed", "app bob@h2", 15.0),
        ("paused", "app bob@h2", 10.0), ("changed", "dashboard 10.0.0.7", 5.0),
        ("added", "cli ada@h1", 0.0)]
    assert changes[3].detail == ("cron '* * * * *' -> '*/2 * * * *', "
                                 "kwargs '{}' -> '{\"a\":1}'")
    assert "cron='* * * * *'" in changes[4].detail and "args=[1]" in changes[4].detail
    assert backend.schedule_changes("ping", limit=2) == changes[:2]
    assert backend.schedule_changes("other") == []


def test_an_edit_stands_until_reset_or_until_the_code_declares_something_new(
        backend: Backend, clock: FakeClock) -> None:
    backend.save_schedules([REPORT.info()], by="worker w1")
    backend.save_schedules([REPORT.info()], by="worker w2")  # nothing new: no entry
    assert [(c.action, c.by) for c in backend.schedule_changes()] == [("declared", "worker w1")]
    edited = backend.change_schedule("report", {"cron": "0 * * * *"}, by="cli ada@h1")
    assert edited.edited and edited.code_definition() == REPORT.info().definition()
    backend.save_schedules([REPORT.info()], by="worker w3")  # a restart keeps the edit
    [kept] = backend.schedules()
    assert (kept.cron, kept.edited) == ("0 * * * *", True)
    assert len(backend.schedule_changes()) == 2
    clock.advance(30)
    reset = backend.reset_schedule("report", by="cli ada@h1")
    assert (reset.cron, reset.edited, reset.changed_at) == ("*/5 * * * *", False, clock.now())
    with pytest.raises(ValueError, match="no edit to reset"):
        backend.reset_schedule("report", by="cli ada@h1")
    backend.change_schedule("report", {"cron": "30 * * * *"}, by="cli ada@h1")
    # Changing it back to the code's definition leaves nothing to override.
    assert not backend.change_schedule("report", {"cron": "*/5 * * * *"}, by="x").edited
    backend.change_schedule("report", {"cron": "15 * * * *"}, by="x")
    # A deploy that declares something new is the latest change: it is put in force.
    clock.advance(30)
    redeclared = Schedule("report", "*/10 * * * *", "tests.report", queue="cron", args=(7,))
    backend.save_schedules([redeclared.info()], by="worker w4")
    [final] = backend.schedules()
    assert (final.cron, final.edited, final.changed_at) == ("*/10 * * * *", False, clock.now())
    assert backend.schedule_changes(limit=1)[0].detail == (
        "cron '15 * * * *' -> '*/10 * * * *' (the edit made at run time is dropped)")
    backend.change_schedule("report", {"cron": "45 * * * *"}, by="x")
    # A deploy that declares exactly the edited definition leaves nothing to override.
    backend.save_schedules([Schedule("report", "45 * * * *", "tests.report", queue="cron",
                                     args=(7,)).info()], by="worker w5")
    [final] = backend.schedules()
    assert (final.cron, final.edited, final.origin) == ("45 * * * *", False, "code")


def test_a_runtime_schedule_the_code_comes_to_declare_is_taken_over_by_the_code(
        backend: Backend) -> None:
    backend.add_schedule(_runtime("report", "0 3 * * *", job="tests.report"), by="cli")
    backend.pause_schedule("report", by="cli")
    backend.save_schedules([REPORT.info()], by="worker w1")
    [info] = backend.schedules()
    assert (info.origin, info.cron, info.paused, info.edited) == ("code", "*/5 * * * *",
                                                                  True, False)
    assert "replacing the definition added at run time" in backend.schedule_changes()[0].detail


def test_the_audit_trail_keeps_the_newest_changes(backend: Backend) -> None:
    backend.add_schedule(_runtime("ping", "* * * * *"), by="cli")
    for i in range(CHANGES_KEPT // 2 + 2):
        backend.pause_schedule("ping", by=f"op{i}")
        backend.resume_schedule("ping", by=f"op{i}")
    changes = backend.schedule_changes(limit=CHANGES_KEPT + 10)
    assert len(changes) == CHANGES_KEPT
    last = CHANGES_KEPT // 2 + 1
    assert [(c.action, c.by) for c in changes[:2]] == [("resumed", f"op{last}"),
                                                        ("paused", f"op{last}")]
    assert all(c.action in ("paused", "resumed") for c in changes)  # "added" was dropped


def test_schedules_changed_at_run_time_tick_exactly_once_on_every_worker(
        backend: Backend, clock: FakeClock) -> None:
    """Four schedulers on four connections look at the same moments while an operator adds,
    changes, pauses and removes schedules: every tick of the definition in force is enqueued
    once, none from before a change, none while paused or after removal."""
    to_next_minute(clock)
    with connections(backend, clock, 5) as (*stores, operator):
        schedulers = [CronScheduler(s, clock, CronConfig(catch_up=300), [REPORT],
                                    jobs=JOBS.get, by=f"worker {i}")
                      for i, s in enumerate(stores)]
        gate = threading.Barrier(len(schedulers))

        def look(i: int) -> None:
            gate.wait(30)
            schedulers[i].tick()

        def minutes(count: int) -> None:
            for _ in range(count):
                clock.advance(60)
                run_in_threads(look, len(schedulers))

        run_in_threads(look, len(schedulers))  # registers REPORT everywhere
        operator.add_schedule(_runtime("ping", "* * * * *"), by="cli")
        operator.add_schedule(_runtime("stranger", "* * * * *", job="tests.unknown"), by="cli")
        added = clock.now()
        minutes(3)
        operator.change_schedule("ping", {"cron": "*/2 * * * *"}, by="cli")
        changed = clock.now()
        minutes(4)
        operator.pause_schedule("ping", by="cli")
        minutes(2)
        operator.resume_schedule("ping", by="cli")
        resumed = clock.now()
        minutes(2)
        operator.remove_schedule("ping", by="cli")
        removed = clock.now()
        minutes(2)
    ticks = periodic_ticks(backend)
    assert set(ticks.values()) == {1}, "a tick was enqueued more than once"
    pings = sorted(t for name, t in ticks if name == "ping")
    every = Schedule("x", "* * * * *", "x")
    second = Schedule("x", "*/2 * * * *", "x")
    assert pings == (every.ticks_between(added, changed)
                     + second.ticks_between(changed, changed + 240)
                     + second.ticks_between(resumed, removed))
    assert not any(name == "stranger" for name, _ in ticks), "no worker defines its job"
    assert all(t > added for name, t in ticks if name == "report")


def test_a_stored_schedule_that_cannot_run_stops_alone(backend: Backend,
                                                       clock: FakeClock) -> None:
    # Stores take what a client checked; one that does not check (or damage) may leave a
    # definition no worker can run: only that schedule stops, and says why in the log.
    to_next_minute(clock)
    backend.add_schedule(_runtime("ping", "* * * * *"), by="cli")
    bad = ScheduleInfo("broken", "not a cron", "Mars/Olympus", "tests.ping", "cron")
    backend.add_schedule(bad, by="a client that does not check")
    odd = ScheduleInfo("odd", "* * * * *", "UTC", "tests.ping", "cron", args='{"a": 1}')
    backend.add_schedule(odd, by="a client that does not check")
    sch = CronScheduler(backend, clock, CronConfig(catch_up=300), [], jobs=JOBS.get)
    clock.advance(120)
    assert sch.tick() == 2
    assert {name for name, _ in periodic_ticks(backend)} == {"ping"}
