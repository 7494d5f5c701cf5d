"""The reserve (worker/reserve.py): jobs leased ahead of the free slots while jobs are short,
bounded by the pace they start at; handed back at quiet, their leases extended, a cancel or a
lost lease applied before they start."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from conveyor import Conveyor, FakeClock, JobState
from conveyor.core.job import HeartbeatReply, LeasedJob
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.launcher import Launcher
from conveyor.worker.recoverer import Recoverer
from conveyor.worker.reserve import Reserve
from tests.worker.backends import every_backend_app  # noqa: F401 (the ``app`` fixture)


def _until(ready: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    return ready()


class _Ticks:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_reserve_holds_what_starts_within_its_window_at_the_pace() -> None:
    ticks = _Ticks()
    reserve = Reserve(limit=40, window=0.05, clock=ticks)
    assert reserve.target() == 0 and reserve.wanted() == 0  # no pace yet: nothing ahead
    reserve.started(50)  # the first jobs: the first span starts with them
    ticks.now += 0.005
    reserve.started(1)  # 5 ms: too short a span to measure, counted into it
    assert reserve.pace == 0.0
    ticks.now += 0.995
    reserve.started(49)  # 100 jobs in the first second, taken as they are
    assert reserve.pace == 100.0
    assert reserve.target() == 5 and reserve.wanted() == 5  # 5 start within 50 ms
    for _ in range(4):  # 20,000 a second for 0.2 s, smoothed with the 100 before
        ticks.now += 0.05
        reserve.started(1_000)
    assert reserve.pace > 5_000
    assert reserve.target() == 40  # the limit caps it
    ticks.now += 4.0
    reserve.started(4)  # a slow spell: one job a second
    assert reserve.pace < 20 and reserve.target() == 0  # slow jobs: nothing held ahead


def test_time_spent_waiting_for_work_is_not_counted_in_the_pace() -> None:
    ticks = _Ticks()
    reserve = Reserve(limit=40, window=0.05, clock=ticks)
    reserve.started(20)  # a few jobs, then an hour with nothing to do
    ticks.now += 3600.0
    reserve.waited(3600.0)
    ticks.now += 0.06
    reserve.started(980)  # a burst: 1,000 jobs in 60 ms of work
    assert 16_000 < reserve.pace < 17_000  # the first span, taken as it is
    assert reserve.target() == 40  # the reserve opens at once


def test_the_reserve_is_topped_up_only_below_half_its_target() -> None:
    ticks = _Ticks()
    reserve = Reserve(limit=20, window=1.0, clock=ticks)
    reserve.started(500)
    ticks.now += 1.0
    reserve.started(500)
    assert reserve.wanted() == 20
    leased = [_job(f"j{n}") for n in range(12)]
    reserve.put(leased)
    assert reserve.wanted() == 0  # 12 held of 20: a round trip for 8 is not worth it
    assert [j.id for j in reserve.take(3)] == ["j0", "j1", "j2"]  # oldest first
    assert reserve.wanted() == 11  # 9 held: fill up to 20
    assert reserve.leases() == {f"j{n}": f"t-j{n}" for n in range(3, 12)}
    assert reserve.remove("j5", "another lease") is None  # only the lease held here
    assert reserve.remove("j5", "t-j5") is not None and len(reserve) == 8
    assert len(reserve.take_all()) == 8 and len(reserve) == 0
    assert Reserve(limit=0, window=1.0).target() == 0  # reserve=0: never ahead


def _job(job_id: str) -> LeasedJob:
    return LeasedJob(id=job_id, name="n", queue="default", payload="[]", token=f"t-{job_id}",
                     attempt=1, errors=0, max_retries=0, timeout=None, batch_id=None)


def _short_jobs(app: Conveyor, count: int) -> list[str]:
    @app.job(name="short")
    def short(n: int) -> int:
        time.sleep(0.001)  # a short job: the 4 slots start a few thousand a second
        return n

    return [short.enqueue(n).id for n in range(count)]


def _fill_reserve(launcher: Launcher) -> None:
    """Give the worker the pace of short jobs, then lease 4 for its slots and 6 ahead."""
    reserve = launcher.reserve
    reserve._pace = 10_000.0  # as measured after a spell of short jobs
    assert launcher.fetcher.tick(ahead=6) == 10


def test_a_busy_worker_leases_ahead_and_runs_every_job_once(app: Conveyor) -> None:
    ids = _short_jobs(app, 1_000)
    sizes: list[int] = []
    dequeue = app.storage.dequeue

    def counting(queues: Any, worker_id: str, count: int, lease: float,
                 capacity: int = 0, acks: Any = ()) -> Any:
        sizes.append(count)
        return dequeue(queues, worker_id, count, lease, capacity, acks)

    app.storage.dequeue = counting  # type: ignore[method-assign]
    launcher = Launcher(app, WorkerConfig(concurrency=4, worker_id="w1"))
    launcher.start()
    try:
        assert _until(lambda: app.storage.count_jobs(state=JobState.SUCCEEDED) == 1_000, 60)
    finally:
        launcher.stop(5.0)
    assert all(app.get_job(i).state is JobState.SUCCEEDED for i in ids)  # type: ignore[union-attr]
    assert all(app.get_job(i).attempt == 1 for i in ids)  # type: ignore[union-attr]
    assert max(sizes) > 4  # more than the 4 slots in one call, once the pace was known
    assert launcher.reserve.reserved > 0


def test_quiet_hands_back_the_reserve_unstarted(app: Conveyor, clock: FakeClock) -> None:
    gate = threading.Event()

    @app.job(name="held")
    def held(n: int) -> int:
        gate.wait(10)
        return n

    ids = [held.enqueue(n).id for n in range(12)]
    launcher = Launcher(app, WorkerConfig(concurrency=4, worker_id="w1"), clock)
    launcher.threads.start()
    launcher.acker.start()
    try:
        _fill_reserve(launcher)
        assert len(launcher.reserve) == 6
        assert set(launcher.heartbeat.leases()) >= {j.id for j in launcher.reserve._jobs}
        launcher.fetcher.quiet()
        assert len(launcher.reserve) == 0
        gate.set()
        assert _until(lambda: len(launcher.inflight) == 0)
        assert launcher.acker.flush(5.0)
    finally:
        gate.set()
        launcher.acker.stop(5.0)
        launcher.threads.stop(5.0)
    jobs = [app.get_job(i) for i in ids]
    assert sum(j.state is JobState.SUCCEEDED for j in jobs) == 4  # type: ignore[union-attr]
    back = [j for j in jobs if j.state is JobState.PENDING]  # type: ignore[union-attr]
    assert len(back) == 8  # six from the reserve, two never leased
    assert all(j.errors == 0 for j in back)  # type: ignore[union-attr]


def test_a_cancel_or_a_lost_lease_reaches_a_reserved_job_before_it_starts(
        app: Conveyor, clock: FakeClock) -> None:
    gate = threading.Event()
    ran: list[int] = []

    @app.job(name="held")
    def held(n: int) -> int:
        ran.append(n)
        gate.wait(10)
        return n

    args = {held.enqueue(n).id: n for n in range(10)}
    launcher = Launcher(app, WorkerConfig(concurrency=4, worker_id="w1"), clock)
    launcher.threads.start()
    try:
        _fill_reserve(launcher)
        waiting = list(launcher.reserve._jobs)
        cancelled, lost = waiting[0], waiting[1]
        leases = launcher.heartbeat.leases()
        launcher.heartbeat.handle(HeartbeatReply(lost=frozenset([lost.id]),
                                                 cancel=frozenset([cancelled.id])), leases)
        assert len(launcher.reserve) == 4
        gate.set()
        while len(launcher.reserve) or len(launcher.inflight):
            launcher.fetcher.take_reserved(launcher.inflight.free)
            time.sleep(0.01)
        assert launcher.acker.flush(5.0)
    finally:
        gate.set()
        launcher.threads.stop(5.0)
    assert args[cancelled.id] not in ran and args[lost.id] not in ran
    assert app.get_job(cancelled.id).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert app.get_job(lost.id).state is JobState.ACTIVE  # type: ignore[union-attr]
    assert len(ran) == 8


def test_a_recovered_job_leased_ahead_waits_in_the_reserve_instead_of_bouncing(
        app: Conveyor, clock: FakeClock) -> None:
    """Every slot busy, the reserve topped up: a suspect among the jobs leased ahead waits
    there for a slot (isolation decides when it starts) instead of being handed back, which
    at every top-up would have kept it from running as long as the reserve never ran dry."""
    gate = threading.Event()
    ran: list[int] = []

    @app.job(name="held")
    def held(n: int) -> int:
        ran.append(n)
        gate.wait(10)
        return n

    @app.job(name="filler", queue="first")
    def filler(n: int) -> int:
        return held(n)

    suspect = held.enqueue(-1)
    config = WorkerConfig(queues=(QueueWeight("first"), QueueWeight("default")), strict=True,
                          concurrency=2, reserve=8, worker_id="w1")
    assert len(app.storage.dequeue(["default"], "crashed", 1, config.lease)) == 1
    clock.advance(config.lease + 1)
    Recoverer(app.storage, clock, config).tick()  # back to pending, one recovery counted
    for n in range(2):
        filler.enqueue(10 + n)  # strict order: these two fill both slots first
    for n in range(3):
        held.enqueue(n)
    launcher = Launcher(app, config, clock)
    launcher.threads.start()
    try:
        launcher.reserve._pace = 10_000.0
        assert launcher.fetcher.tick() == 2  # the fillers take both slots
        assert launcher.fetcher.tick(ahead=4) == 4  # the suspect and three fresh jobs
        assert launcher.fetcher.isolation.handed_back == 0
        assert suspect.id in launcher.reserve.leases()
        assert launcher.fetcher.ahead() == 0  # 4 held of a target of 8: none wanted yet
        launcher.fetcher.take_reserved(1)  # as if a slot had freed: the suspect starts
        assert launcher.fetcher.isolation.busy
        launcher.reserve.take_all()  # (their leases simply expire in this test)
        assert launcher.reserve.wanted() > 0
        assert launcher.fetcher.ahead() == 0  # nothing leased ahead beside a suspect
        gate.set()
        while len(launcher.reserve) or len(launcher.inflight):
            launcher.fetcher.take_reserved(launcher.inflight.free)
            time.sleep(0.01)
        assert launcher.acker.flush(5.0)
    finally:
        gate.set()
        launcher.threads.stop(5.0)
    assert sorted(ran)[:1] == [-1] and {10, 11} <= set(ran)
    assert app.get_job(suspect.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_every_worker_may_lease_sixteen_times_its_slots_ahead_broker_or_not(
        tmp_path: Any) -> None:
    """One default, whatever delivers the jobs: the reserve's real bound is time (what the
    process starts within its window), the count only a ceiling; an explicit ``reserve``
    wins either way."""
    config = WorkerConfig(concurrency=5)
    assert config.reserve_limit() == 80
    assert WorkerConfig(concurrency=5, reserve=7).reserve_limit() == 7
    plain = Conveyor(f"sqlite:///{tmp_path}/plain.db")
    fed = Conveyor(f"sqlite:///{tmp_path}/fed.db", broker=f"memory://{tmp_path.name}")
    try:
        assert Launcher(plain, config).reserve.limit == 80
        assert Launcher(fed, config).reserve.limit == 80
    finally:
        plain.close()
        fed.close()


def test_a_drain_of_short_jobs_leases_beyond_four_times_the_slots_in_one_call(
        app: Conveyor) -> None:
    """With the pace of short jobs known, a call of the fetcher leases for the free slots and
    tops the reserve up to its window: more than the four times the slots the first default
    allowed (each call's fixed cost is what a drain of short jobs pays for)."""
    _short_jobs(app, 200)
    launcher = Launcher(app, WorkerConfig(concurrency=4, worker_id="w1"))
    launcher.reserve._pace = 10_000.0  # as measured after a spell of short jobs: 500 in 50 ms
    ahead = launcher.fetcher.ahead()
    assert ahead == 64  # the ceiling, 16 x 4 slots: the window alone would hold 500
    assert launcher.fetcher.tick(ahead) == 68
    assert len(launcher.reserve) == 64


def test_a_freed_slot_starts_a_reserved_job_while_the_fetcher_is_in_a_storage_call(
        app: Conveyor) -> None:
    """The fetcher tops the reserve up while the slots run; a slot that frees during that
    call takes its next job from the reserve at once, in the thread of the job that ended,
    instead of idling until the call returns (a third of a drain of no-op jobs did)."""
    ran: list[int] = []

    @app.job(name="quick")
    def quick(n: int) -> int:
        ran.append(n)
        return n

    for n in range(20):
        quick.enqueue(n)
    calls = 0
    in_top_up, release = threading.Event(), threading.Event()
    dequeue = app.storage.dequeue

    def slow_second_call(queues: Any, worker_id: str, count: int, lease: float,
                         capacity: int = 0, acks: Any = ()) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first top-up: held in the storage until the test lets it go
            in_top_up.set()
            release.wait(60)
        return dequeue(queues, worker_id, count, lease, capacity, acks)

    app.storage.dequeue = slow_second_call  # type: ignore[method-assign]
    launcher = Launcher(app, WorkerConfig(concurrency=1, reserve=4, reserve_window=100.0,
                                          worker_id="w1"))
    launcher.reserve._pace = 1_000.0  # the pace of short jobs: 4 are leased ahead at once
    launcher.start()
    try:
        assert in_top_up.wait(30)  # 1 + 4 leased; 3 started from the reserve, 1 held
        # the fetcher waits in its storage call; the last reserved job must not wait for it
        assert _until(lambda: len(ran) == 5, 30), f"ran {len(ran)} of the 5 leased"
        assert calls == 2 and not release.is_set()
    finally:
        release.set()
        launcher.stop(5.0)
    assert sorted(ran[:5]) == [0, 1, 2, 3, 4]
