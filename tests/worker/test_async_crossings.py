"""How ``async def`` jobs reach the worker's event loop (``AsyncExecutor``), and when a job that
ends wakes the fetcher (``Launcher.finish``): counted, never timed (issue 53, W0b)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from conveyor import Conveyor, JobState
from conveyor.core.job import Ack
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executors import AsyncExecutor
from conveyor.worker.inflight import Entry
from conveyor.worker.launcher import Launcher
from conveyor.worker.processor import Processor
from tests.worker.helpers import lease_one


def _until(ready: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _entries(app: Conveyor, processor: Processor, names: list[str]) -> list[Entry]:
    """One leased, prepared entry per name, of the async job ``record``."""
    ran: list[str] = app.ran  # type: ignore[attr-defined]

    @app.job(name="record")
    async def record(name: str) -> None:
        ran.append(name)

    for name in names:
        record.enqueue(name)
    out = [lease_one(app, processor) for _ in names]
    assert all(isinstance(e, Entry) for e in out)
    return [e for e in out if isinstance(e, Entry)]


def _executor(app: Conveyor) -> tuple[AsyncExecutor, Processor, list[Ack]]:
    processor = Processor(app, "test-worker", app.clock)
    acks: list[Ack] = []
    app.ran = []  # type: ignore[attr-defined]
    return AsyncExecutor(processor, lambda entry, ack: acks.append(ack)), processor, acks


def test_a_page_of_async_jobs_crosses_into_the_loop_once_and_starts_in_order(
        app: Conveyor) -> None:
    """A fetch's jobs are handed to the loop in one crossing, not one per job, and start in
    the order they were submitted: a queue is first in, first out [Sidekiq, asynq: FIFO
    queues], and a raw asyncio queue pays no crossing at all (W0b's reference)."""
    executor, processor, acks = _executor(app)
    names = [f"j{n}" for n in range(6)]
    entries = _entries(app, processor, names)
    blocked, gate = threading.Event(), threading.Event()

    def hold() -> None:  # the loop is busy while the page is submitted
        blocked.set()
        gate.wait(30)

    executor._ensure_loop().call_soon_threadsafe(hold)
    try:
        assert blocked.wait(10)
        for entry in entries:
            executor.submit(entry)
        gate.set()
        assert _until(lambda: len(acks) == len(names))
    finally:
        gate.set()
        executor.stop()
    assert executor.crossings == 1
    assert app.ran == names  # type: ignore[attr-defined]
    assert {a.outcome.value for a in acks} == {"succeeded"}


def test_a_job_submitted_on_the_loop_starts_at_once_after_those_already_on_their_way(
        app: Conveyor) -> None:
    """A job started by the job that ended (the reserve's, ``Launcher.finish`` on the loop's
    thread) needs no crossing; one submitted before it from another thread still starts
    first [FIFO, as above]."""
    executor, processor, acks = _executor(app)
    first, second = _entries(app, processor, ["first", "second"])
    blocked, gate = threading.Event(), threading.Event()

    def on_the_loop() -> None:
        blocked.set()
        gate.wait(30)  # meanwhile ``first`` is submitted from the test's thread
        executor.submit(second)

    executor._ensure_loop().call_soon_threadsafe(on_the_loop)
    try:
        assert blocked.wait(10)
        executor.submit(first)
        gate.set()
        assert _until(lambda: len(acks) == 2)
    finally:
        gate.set()
        executor.stop()
    assert executor.crossings == 1  # ``first``'s; ``second`` was started where it was
    assert app.ran == ["first", "second"]  # type: ignore[attr-defined]


def test_a_stopped_loop_leaves_no_crossing_behind_for_the_next(app: Conveyor) -> None:
    """A job submitted after a stop (a new loop) starts: the stopped loop's crossing that
    never ran does not hold the next submissions back."""
    executor, processor, acks = _executor(app)
    stuck, later = _entries(app, processor, ["stuck", "later"])
    blocked, gate = threading.Event(), threading.Event()

    def hold() -> None:
        blocked.set()
        gate.wait(30)

    executor._ensure_loop().call_soon_threadsafe(hold)
    assert blocked.wait(10)
    executor.submit(stuck)  # its crossing waits behind ``hold``; the loop stops first
    executor.stop(timeout=0.1)
    gate.set()
    executor.submit(later)
    try:
        assert _until(lambda: len(acks) == 1)
    finally:
        executor.stop()
    assert app.ran == ["later"]  # type: ignore[attr-defined]


def test_a_slot_a_reserved_job_takes_again_does_not_wake_the_fetcher(app: Conveyor) -> None:
    """The fetcher leases for free slots only: a job that ends and whose slot is taken at
    once by a reserved job wakes it for nothing (a thread switch per job); a slot left free
    wakes it, so no work waits for its ``idle_wait`` [Sidekiq, asynq: a processor that
    frees asks for its next job at once]."""

    gate = threading.Event()  # holds the refill in its slot until the test has looked

    @app.job(name="quick")
    async def quick(n: int) -> int:
        await asyncio.to_thread(gate.wait, 10.0)
        return n

    for n in range(3):
        quick.enqueue(n)
    launcher = Launcher(app, WorkerConfig(concurrency=1, worker_id="test-worker"))
    woken: list[int] = []
    wake = launcher.inflight.wake

    def counted() -> None:
        woken.append(1)
        wake()

    launcher.inflight.wake = counted  # type: ignore[method-assign]
    processor = launcher.processor
    try:
        running = lease_one(app, processor)
        assert isinstance(running, Entry)
        launcher.inflight.add(running)
        launcher.reserve.put(app.storage.dequeue(["default"], "test-worker", 1, 10.0))
        assert launcher.inflight.free == 0 and len(launcher.reserve) == 1

        launcher.finish(running, processor.success(running, None))
        assert len(launcher.reserve) == 0 and launcher.inflight.free == 0  # refilled
        assert woken == []

        [refill] = list(launcher.inflight)
        gate.set()
        assert _until(lambda: not launcher.inflight.holds(refill))  # it ran on the loop
        assert woken == [1]  # nothing in the reserve: the slot stays free
    finally:
        launcher.loop.stop()
    assert launcher.acker.flush()  # both outcomes written
    for entry in (running, refill):
        record = app.get_job(entry.job.id)
        assert record is not None and record.state is JobState.SUCCEEDED
