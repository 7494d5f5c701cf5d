"""A whole worker (Launcher) in this process on real storage and the real clock."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

import redis
from conveyor import Conveyor, FakeClock, JobState, current_job
from conveyor.core.ids import new_id
from conveyor.storage.workers import WorkerInfo
from conveyor.testing import drain
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.executors import ThreadExecutor
from conveyor.worker.inflight import Entry, InFlight
from conveyor.worker.launcher import Launcher
from conveyor.worker.processor import Processor
from conveyor.worker.signals import SignalPipe, dump_stacks
from conveyor.worker.watchdog import Watchdog
from tests.worker.helpers import lease_one


def _until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def _state(app: Conveyor, job_id: str) -> JobState | None:
    record = app.get_job(job_id)
    return None if record is None else record.state


def test_runs_sync_and_async_jobs_from_weighted_queues(live_app: Conveyor) -> None:
    @live_app.job(queue="critical")
    def double(x: int) -> int:
        return 2 * x

    @live_app.job
    async def triple(x: int) -> int:
        await asyncio.sleep(0)
        return 3 * x

    refs = [double.enqueue(i) for i in range(50)] + [triple.enqueue(i) for i in range(50)]
    config = WorkerConfig(queues=(QueueWeight("critical", 3), QueueWeight("default")),
                          concurrency=5)
    launcher = Launcher(live_app, config)
    launcher.start()
    try:
        assert _until(lambda: all(_state(live_app, r.id) is JobState.SUCCEEDED for r in refs))
    finally:
        launcher.stop(5)
    assert live_app.get_job(refs[-1].id).result == "147"  # type: ignore[union-attr]
    assert live_app.storage.workers() == []  # unregistered at stop


def test_never_leases_more_jobs_than_free_slots(live_app: Conveyor) -> None:
    gate = threading.Event()

    @live_app.job
    def wait_for_gate() -> None:
        gate.wait(10)

    refs = [wait_for_gate.enqueue() for _ in range(6)]
    launcher = Launcher(live_app, WorkerConfig(concurrency=2))
    launcher.start()
    try:
        assert _until(lambda: len(launcher.inflight) == 2)
        time.sleep(0.2)
        states = [_state(live_app, r.id) for r in refs]
        assert states.count(JobState.ACTIVE) == 2 and states.count(JobState.PENDING) == 4
    finally:
        gate.set()
        assert _until(lambda: all(_state(live_app, r.id) is JobState.SUCCEEDED for r in refs))
        launcher.stop(5)


def test_stop_puts_jobs_longer_than_the_timeout_back_to_pending(live_app: Conveyor) -> None:
    gate = threading.Event()
    started = threading.Event()
    runs: list[threading.Thread] = []

    @live_app.job
    def slow() -> str:
        runs.append(threading.current_thread())
        started.set()
        gate.wait(10)
        return f"run {len(runs)}"

    ref = slow.enqueue()
    launcher = Launcher(live_app, WorkerConfig(concurrency=2))
    launcher.start()
    assert started.wait(5)
    launcher.stop(timeout=0.2)
    record = live_app.get_job(ref.id)
    assert record is not None and record.state is JobState.PENDING
    assert record.errors == 0
    assert any(e.kind == "interrupted" for e in record.events or [])
    written = launcher.acker.written
    # The next worker runs it again while the first run is still blocked; then the first
    # run ends, late, in the stopped worker's abandoned thread.
    again = Launcher(live_app, WorkerConfig(concurrency=2))
    again.start()
    try:
        assert _until(lambda: len(runs) == 2)
        gate.set()
        assert _until(lambda: _state(live_app, ref.id) is JobState.SUCCEEDED)
    finally:
        again.stop(5)
    runs[0].join(10)
    assert not runs[0].is_alive()  # the late outcome has been handed to the first worker...
    # ...which dropped it: nothing queued on its stopped acker, nothing more written.
    assert len(launcher.acker) == 0 and launcher.acker.written == written
    record = live_app.get_job(ref.id)
    assert record is not None and record.result == '"run 2"'
    assert [e.kind for e in record.events or []].count("succeeded") == 1


def test_quiet_stops_fetching_but_finishes_running_jobs(live_app: Conveyor) -> None:
    gate = threading.Event()
    started = threading.Event()

    @live_app.job
    def step(n: int) -> int:
        if n == 0:
            started.set()
            gate.wait(10)
        return n

    first = step.enqueue(0)
    launcher = Launcher(live_app, WorkerConfig(concurrency=2))
    launcher.start()
    try:
        assert started.wait(5)
        launcher.quiet()
        later = step.enqueue(1)
        gate.set()
        assert _until(lambda: _state(live_app, first.id) is JobState.SUCCEEDED)
        time.sleep(0.3)
        assert _state(live_app, later.id) is JobState.PENDING
    finally:
        launcher.stop(5)


@pytest.mark.redis
def test_a_job_leased_behind_a_wait_after_quiet_is_handed_back_unrun(
    redis_server: object,
) -> None:
    """On Redis an idle fetcher's lease is pipelined behind its BLPOP, so ``quiet`` does not
    wait for the pop: a job that wakes it afterwards is leased, then handed straight back."""
    url = f"{redis_server.url}?prefix=q{new_id()}"  # type: ignore[attr-defined]
    app = Conveyor(url)
    ran: list[int] = []

    @app.job
    def record(n: int) -> None:
        ran.append(n)

    client = redis.Redis.from_url(redis_server.url)  # type: ignore[attr-defined]

    def blocked() -> int:
        return int(client.info("clients")["blocked_clients"])

    before = blocked()
    launcher = Launcher(app, WorkerConfig(concurrency=1, idle_wait=20.0))
    launcher.start()
    try:
        assert _until(lambda: blocked() > before), "the fetcher never blocked in BLPOP"
        launcher.quiet()
        ref = record.enqueue(1)
        assert _until(lambda: _state(app, ref.id) is JobState.PENDING and any(
            e.kind == "interrupted" for e in app.get_job(ref.id).events or ()))  # type: ignore[union-attr]
        events = app.get_job(ref.id).events or ()  # type: ignore[union-attr]
        assert [e.kind for e in events] == ["enqueued", "started", "interrupted"]
        assert events[-1].message == "worker quieted before the job started"
        assert ran == []
    finally:
        launcher.stop(5)
        client.close()
        app.close()


def test_remote_quiet_then_stop_commands_reach_a_running_launcher(live_app: Conveyor) -> None:
    # Through the storage, as `conveyor workers quiet|stop` sends them: the heartbeat picks
    # the command up, a quieted worker takes no new job, a stopped one's run() returns.
    config = WorkerConfig(concurrency=1, heartbeat_interval=0.05, poll_interval=(0.02, 0.05))
    launcher = Launcher(live_app, config)

    @live_app.job
    def after_quiet() -> None: ...

    seen: dict[str, object] = {}

    def operator() -> None:
        try:
            _until(lambda: any(w.id == config.worker_id for w in live_app.storage.workers()))
            seen["quiet sent"] = live_app.storage.command_worker(config.worker_id, "quiet")
            seen["quieted"] = _until(lambda: launcher.fetcher.quieted)
            ref = after_quiet.enqueue()
            assert ref is not None
            time.sleep(0.3)  # several heartbeats and polls: a quiet worker must not take it
            seen["left pending"] = _state(live_app, ref.id) is JobState.PENDING
        finally:
            seen["stop sent"] = live_app.storage.command_worker(config.worker_id, "stop")

    sender = threading.Thread(target=operator, daemon=True)
    sender.start()
    assert launcher.run() == 0  # in pytest's main thread: the real signal pipe
    sender.join(10)
    assert seen == {"quiet sent": True, "quieted": True, "left pending": True,
                    "stop sent": True}
    assert all(w.id != config.worker_id for w in live_app.storage.workers())


def test_watchdog_writes_a_long_jobs_messages_while_it_runs() -> None:
    clock = FakeClock()
    app = Conveyor("memory://", clock=clock)
    config = WorkerConfig(concurrency=1)

    @app.job
    def long_job() -> None:
        pass

    long_job.enqueue()
    processor = Processor(app, "w", clock)
    entry = lease_one(app, processor)
    assert isinstance(entry, Entry)
    inflight = InFlight(1)
    inflight.add(entry)
    watchdog = Watchdog(app.storage, clock, config, inflight=inflight,
                        threads=ThreadExecutor(1, processor, lambda e, a: None),
                        timed_out=processor.timed_out, finish=lambda e, a: None)
    entry.ctx.log("halfway")
    entry.ctx.progress(5, 10)
    watchdog.tick()  # not yet a second old
    assert [e.kind for e in app.get_job(entry.job.id).events or []].count("message") == 0  # type: ignore[union-attr]
    clock.advance(1.0)
    watchdog.tick()
    record = app.get_job(entry.job.id)
    assert record is not None and record.progress == (5, 10)
    assert any(e.message == "halfway" for e in record.events or [])


def test_drain_runs_pending_due_and_follow_up_jobs_in_this_thread() -> None:
    clock = FakeClock()
    app = Conveyor("memory://", clock=clock)
    threads: set[str] = set()

    @app.job(queue="mail")
    def send(to: str) -> str:
        threads.add(threading.current_thread().name)
        return to

    @app.job
    def signup(user: str) -> None:
        current_job().log("signed up")
        send.enqueue(user)

    @app.job
    async def audit() -> int:
        return 1

    signup.enqueue("ada")
    audit.enqueue()
    later = send.enqueue_in(60, "bob")
    assert drain(app) == 3
    assert threads == {threading.current_thread().name}
    assert _state(app, later.id) is JobState.SCHEDULED
    clock.advance(61)
    assert drain(app, queues=["mail"], max_jobs=5) == 1
    assert _state(app, later.id) is JobState.SUCCEEDED


def test_signal_pipe_hands_signals_to_the_main_loop() -> None:
    pipe = SignalPipe((signal.SIGUSR1,)).install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        got: list[int] = []
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            got = pipe.wait(0.5)
        assert got == [signal.SIGUSR1]
        pipe.wake()
        assert pipe.wait(0.5) == [0]
    finally:
        pipe.restore()
    assert "test_signal_pipe_hands_signals_to_the_main_loop" in dump_stacks()


def test_cancel_reaches_running_sync_and_async_jobs(live_app: Conveyor) -> None:
    @live_app.job
    def looping() -> str:
        ctx = current_job()
        for _ in range(1000):
            if ctx.cancelled:
                return "stopped early"
            time.sleep(0.01)
        return "ran to the end"

    @live_app.job
    async def waiting() -> None:
        await asyncio.sleep(30)

    refs = [looping.enqueue(), waiting.enqueue()]
    config = WorkerConfig(concurrency=2, heartbeat_interval=0.05, lease=2.0)
    launcher = Launcher(live_app, config)
    launcher.start()
    try:
        assert _until(lambda: all(_state(live_app, r.id) is JobState.ACTIVE for r in refs))
        for ref in refs:
            assert live_app.cancel(ref.id) is JobState.ACTIVE
        assert _until(lambda: all(_state(live_app, r.id) is JobState.CANCELLED for r in refs))
    finally:
        launcher.stop(5)


def test_a_quiet_that_arrives_while_the_worker_starts_is_kept(live_app: Conveyor) -> None:
    # The command is waiting when the worker registers (its first heartbeat, before the
    # components start): the fetcher's start used to clear it, and the worker went on working.
    config = WorkerConfig(concurrency=1, poll_interval=(0.02, 0.05))
    live_app.storage.heartbeat(
        WorkerInfo(config.worker_id, "host", os.getpid(), ("default",), 1, time.time()), {}, 30)
    assert live_app.storage.command_worker(config.worker_id, "quiet")

    @live_app.job
    def waiting() -> None: ...

    ref = waiting.enqueue()
    launcher = Launcher(live_app, config)
    launcher.start()
    try:
        assert launcher.fetcher.quieted
        time.sleep(0.3)  # several polls: a quiet worker must not take it
        assert _state(live_app, ref.id) is JobState.PENDING
    finally:
        launcher.stop(5)
