"""Periodic schedules in the storage: definitions, pausing, last ticks, and exactly one job
per tick however many schedulers run (each on its own connection, as separate workers)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from conveyor.client.periodic import CronConfig, CronScheduler, Schedule
from conveyor.core.clock import FakeClock
from conveyor.core.job import JobState
from conveyor.storage import Backend
from conveyor.storage.schedule_records import ScheduleInfo
from tests.conformance.helpers import (
    connections,
    periodic_ticks,
    run_in_threads,
    to_next_minute,
)

EVERY_MINUTE = Schedule("heartbeat", "* * * * *", "tests.ping", queue="cron")
EVERY_FIVE = Schedule("report", "*/5 * * * *", "tests.report", queue="cron", args=(7,))






def test_schedules_are_stored_listed_paused_and_keep_operator_state(
        backend: Backend, clock: FakeClock) -> None:
    assert backend.schedules() == [] and backend.schedule_pauses() == {}
    backend.save_schedules([EVERY_MINUTE.info(), EVERY_FIVE.info()])
    created = clock.now()
    assert [s.name for s in backend.schedules()] == ["heartbeat", "report"]
    assert backend.schedules()[1] == ScheduleInfo("report", "*/5 * * * *", "UTC",
                                                  "tests.report", "cron", created_at=created,
                                                  args="[7]")
    clock.advance(7)
    assert backend.pause_schedule("report") is True
    assert backend.pause_schedule("no-such") is False
    backend.schedule_ticked("report", 1_700_000_100.0)
    backend.schedule_ticked("report", 1_700_000_040.0)  # late and older: ignored
    # A worker that starts later saves the definitions again (here with a changed cron):
    backend.save_schedules([Schedule("report", "*/10 * * * *", "tests.report",
                                     queue="cron").info()])
    report = backend.schedules()[1]
    assert (report.cron, report.paused, report.last_tick, report.resumed_at) == (
        "*/10 * * * *", True, 1_700_000_100.0, None)
    assert report.created_at == created  # saving again never moves the creation time
    assert backend.schedule_pauses() == {"report": None}
    clock.advance(42)
    assert backend.resume_schedule("report") is True and backend.resume_schedule("x") is False
    resumed_at = clock.now()
    assert backend.schedule_pauses() == {"report": resumed_at}
    clock.advance(60)
    backend.save_schedules([EVERY_FIVE.info()])  # a restarting worker keeps the resume time
    assert backend.resume_schedule("report") is True  # not paused: the resume time stays
    assert backend.resume_schedule("heartbeat") is True  # never paused: nothing recorded
    assert backend.schedule_pauses() == {"report": resumed_at}
    assert [(s.paused, s.resumed_at) for s in backend.schedules()] == [
        (False, None), (False, resumed_at)]


def test_many_schedulers_enqueue_each_tick_exactly_once(backend: Backend,
                                                        clock: FakeClock) -> None:
    to_next_minute(clock)
    start = clock.now()
    with connections(backend, clock, 4) as stores:
        schedulers = [CronScheduler(s, clock, CronConfig(catch_up=90), [EVERY_MINUTE, EVERY_FIVE])
                      for s in stores]
        for sch in schedulers:
            sch.register()
        gate = threading.Barrier(len(schedulers))

        def look(i: int) -> None:
            gate.wait(30)  # every scheduler looks at the same moment
            schedulers[i].tick()

        for _ in range(20):  # ten minutes in steps of 30 s
            clock.advance(30)
            run_in_threads(look, len(schedulers))
    ticks = periodic_ticks(backend)
    assert set(ticks.values()) == {1}, "a tick was enqueued more than once"
    minutes = sorted(t for name, t in ticks if name == "heartbeat")
    fives = sorted(t for name, t in ticks if name == "report")
    # catch_up=90 s would look back over the tick of the minute the run started in, but
    # that tick is from before the schedules existed: the first one is the next minute's
    first = start - start % 60
    assert minutes == [first + 60 * i for i in range(1, 11)]
    assert fives == [t for t in minutes if t % 300 == 0]
    assert sum(s.enqueued for s in schedulers) == len(ticks)
    assert {s.name: s.last_tick for s in backend.schedules()} == {
        "heartbeat": minutes[-1], "report": fives[-1]}


def test_a_paused_schedule_is_skipped_everywhere_and_not_caught_up(
        backend: Backend, clock: FakeClock) -> None:
    to_next_minute(clock)
    with connections(backend, clock, 2) as (worker, operator):
        sch = CronScheduler(worker, clock, CronConfig(catch_up=30), [EVERY_MINUTE])
        sch.register()
        assert sch.tick() == 0  # the minute that just began is older than the schedule
        clock.advance(60)
        assert sch.tick() == 1
        assert operator.pause_schedule("heartbeat")
        for _ in range(3):
            clock.advance(60)
            assert sch.tick() == 0
        assert operator.resume_schedule("heartbeat")
        clock.advance(60)
        assert sch.tick() == 1  # the tick just due; the three paused minutes stay skipped
    ticks = sorted(t for _, t in periodic_ticks(backend))
    assert len(ticks) == 2 and ticks[1] - ticks[0] == 240


def test_a_restarted_scheduler_enqueues_missed_ticks_once(backend: Backend,
                                                          clock: FakeClock) -> None:
    to_next_minute(clock)
    with connections(backend, clock, 2) as (first, second):
        before = CronScheduler(first, clock, CronConfig(catch_up=300), [EVERY_MINUTE])
        before.register()
        clock.advance(300)
        assert before.tick() == 5  # the ticks of the five minutes since the schedule exists
        seen = sum(periodic_ticks(backend).values())
        clock.advance(150)  # every worker down across two ticks
        after = CronScheduler(second, clock, CronConfig(catch_up=300), [EVERY_MINUTE])
        assert after.tick() == 2  # only the missed ticks; the earlier ones exist already
    ticks = periodic_ticks(backend)
    assert set(ticks.values()) == {1} and sum(ticks.values()) == seen + 2
    assert all(j.state is JobState.PENDING for j in backend.list_jobs(queue="cron"))


def test_a_scheduler_started_after_a_resume_does_not_catch_up_the_paused_ticks(
        backend: Backend, clock: FakeClock) -> None:
    to_next_minute(clock)
    with connections(backend, clock, 3) as (old, operator, new):
        running = CronScheduler(old, clock, CronConfig(catch_up=300), [EVERY_MINUTE])
        running.register()
        clock.advance(300)
        assert running.tick() == 5  # the five minutes since it was registered
        assert operator.pause_schedule("heartbeat")
        clock.advance(180)  # three ticks fall while paused, and the worker stops
        assert operator.resume_schedule("heartbeat")
        clock.advance(70)  # one tick after the resume, then a new worker starts
        started = CronScheduler(new, clock, CronConfig(catch_up=300), [EVERY_MINUTE])
        started.register()
        assert started.tick() == 1  # its look-back reaches the paused minutes: skipped
    ticks = sorted(t for _, t in periodic_ticks(backend))
    assert len(ticks) == 6 and ticks[-1] - ticks[-2] == 240


def test_a_long_gap_between_looks_catches_up_only_the_catch_up_window(
        backend: Backend, clock: FakeClock) -> None:
    # A scheduler whose looks kept failing (storage down) or stalled for longer than
    # catch_up resumes like a restarted one: older ticks are beyond their unique lock's
    # guarantee, so enqueueing them could run a tick twice.
    to_next_minute(clock)
    sch = CronScheduler(backend, clock, CronConfig(catch_up=120), [EVERY_MINUTE])
    sch.register()
    clock.advance(120)
    assert sch.tick() == 2
    clock.advance(1200)
    assert sch.tick() == 2  # the last two minutes, not the twenty
    assert sorted(periodic_ticks(backend).values()) == [1, 1, 1, 1]


def _wait(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll until ``check()`` holds: the scheduler threads look every 10 ms."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_scheduler_threads_stopped_across_ticks_and_restarted(backend: Backend,
                                                              clock: FakeClock) -> None:
    # The worker's own lifecycle: start() registers and looks on a thread, stop() ends it.
    to_next_minute(clock)
    config = CronConfig(interval=0.01, catch_up=300)

    def count() -> int:
        return sum(periodic_ticks(backend).values())

    backend.save_schedules([EVERY_MINUTE.info()])  # an earlier worker registered it
    clock.advance(300)
    with connections(backend, clock, 3) as (a, b, later):
        running = [CronScheduler(s, clock, config, [EVERY_MINUTE]) for s in (a, b)]
        for sch in running:
            sch.start()
        _wait(lambda: count() == 5, "the five minutes of look-back")
        assert [s.name for s in backend.schedules()] == ["heartbeat"]
        clock.advance(60)
        _wait(lambda: count() == 6, "the next tick")
        clock.advance(60)
        _wait(lambda: count() == 7, "the tick after")
        for sch in running:
            sch.stop()
        clock.advance(150)  # every worker down across two ticks
        restarted = CronScheduler(later, clock, config, [EVERY_MINUTE])
        restarted.start()
        _wait(lambda: count() == 9, "the two missed ticks")
        time.sleep(0.1)  # ten more looks: nothing else may appear
        restarted.stop()
    ticks = periodic_ticks(backend)
    minutes = sorted(t for _, t in ticks)
    assert set(ticks.values()) == {1}
    assert [b - a for a, b in itertools.pairwise(minutes)] == [60] * 8
    assert backend.schedules()[0].last_tick == minutes[-1]


def test_a_new_schedule_never_catches_up_ticks_from_before_it_existed(
        backend: Backend, clock: FakeClock) -> None:
    # Registered for the first time at 10:00:31 with a five-minute look-back, the minute
    # schedule enqueued 09:56..10:00 (five ticks from before it existed). Every worker that
    # starts later, however soon, reads the same creation time from the storage.
    to_next_minute(clock)
    clock.advance(30)
    with connections(backend, clock, 2) as (first, second):
        config = CronConfig(catch_up=300)
        a = CronScheduler(first, clock, config, [EVERY_MINUTE, EVERY_FIVE])
        a.register()
        created = clock.now()
        assert a.tick() == 0
        clock.advance(10)
        b = CronScheduler(second, clock, config, [EVERY_MINUTE, EVERY_FIVE])
        assert b.tick() == 0  # registers on its first look, then looks back 300 s: nothing
        clock.advance(60)
        expected = sum(len(s.ticks_between(created, clock.now()))
                       for s in (EVERY_MINUTE, EVERY_FIVE))
        assert expected >= 1 and a.tick() + b.tick() == expected
    ticks = periodic_ticks(backend)
    assert sum(ticks.values()) == expected and all(t > created for _, t in ticks)
    assert {s.name: s.created_at for s in backend.schedules()} == {
        "heartbeat": created, "report": created}
