"""The first job of a wake is handed to its pool thread before the fetcher goes on (issue 53,
idle latency): queued, it waited while the fetcher ran on to its next fetch. asynq's processor
hands a dequeued task to a worker goroutine it already holds, and Sidekiq's processors pop and
run on one thread: the job starts as soon as it is fetched. The worker's rules stay: never
more jobs at once than its slots, a shutdown during the wait ends it, acks still ride with the
wait's lease. (The wait itself stays on the fetcher's thread: the stores keep per-thread wait
state, the PostgreSQL LISTEN connection among it.)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from conveyor import Conveyor, FakeClock, JobState
from conveyor.core.job import Ack, Outcome
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executors import ThreadExecutor
from conveyor.worker.inflight import Entry, InFlight
from conveyor.worker.launcher import Launcher
from conveyor.worker.processor import Processor
from tests.support.waiting import wait_until
from tests.worker.helpers import lease_one


def _state(app: Conveyor, job_id: str) -> JobState | None:
    record = app.get_job(job_id)
    return None if record is None else record.state


class _Waits:
    """Wraps ``storage.wait_dequeue``: the threads that called it, and an event per call."""

    def __init__(self, app: Conveyor) -> None:
        self.threads: list[threading.Thread] = []
        self.leased: dict[str, threading.Thread] = {}  # job id → the thread whose wait leased it
        self.acks: list[list[Ack]] = []
        self.waiting = threading.Event()
        self._wait: Any = app.storage.wait_dequeue
        app.storage.wait_dequeue = self  # type: ignore[method-assign]

    def __call__(self, *args: Any, acks: Sequence[Ack] = (), **kwargs: Any) -> Any:
        self.threads.append(threading.current_thread())
        self.acks.append(list(acks))
        self.waiting.set()
        leases = self._wait(*args, acks=acks, **kwargs)
        self.leased.update((job.id, threading.current_thread()) for job in leases)
        return leases


def test_hand_returns_only_once_a_pool_thread_has_taken_the_job(clock: FakeClock) -> None:
    """The fetcher steps aside for the first job of a wake: ``hand`` returns when a pool
    thread holds the job, not when it is merely queued (asynq's processor gives a task to a
    worker it already holds)."""
    app = Conveyor("memory://", clock=clock)
    gate, first_running = threading.Event(), threading.Event()
    ran: list[str] = []

    @app.job(name="idle.first")
    def first() -> None:
        first_running.set()
        gate.wait(30)

    @app.job(name="idle.second")
    def second() -> None:
        ran.append(threading.current_thread().name)

    processor = Processor(app, "idle-0", clock)
    inflight = InFlight(2)
    def finish(entry: Entry, ack: Ack) -> None:
        inflight.claim(entry)

    pool = ThreadExecutor(1, processor, finish)
    pool.start()
    handed = threading.Event()
    try:
        first.enqueue()
        second.enqueue()
        busy, queued = lease_one(app, processor), lease_one(app, processor)
        assert isinstance(busy, Entry) and isinstance(queued, Entry)
        inflight.add(busy)
        pool.submit(busy)
        assert first_running.wait(10)  # the pool's only thread is busy until the gate opens
        inflight.add(queued)
        def hand() -> None:
            pool.hand(queued, 60.0)
            handed.set()

        hander = threading.Thread(target=hand)
        hander.start()
        assert not handed.is_set()  # no thread could take it: hand has not returned
        gate.set()
        hander.join(30)
        assert handed.is_set()
        assert wait_until(lambda: ran, 10) == ["conveyor-job-1"]
    finally:
        gate.set()
        pool.stop(5.0)
        app.close()


def test_an_idle_worker_runs_the_job_of_a_wake_on_a_pool_thread(live_app: Conveyor) -> None:
    """An idle worker (waiting in ``wait_dequeue``) runs a job enqueued then, on every store,
    on a pool thread: the fetcher's own thread goes back to fetching."""
    ran: list[str] = []

    @live_app.job(name="idle.where")
    def where() -> None:
        ran.append(threading.current_thread().name)

    waits = _Waits(live_app)
    launcher = Launcher(live_app, WorkerConfig(concurrency=2, worker_id="idle-1"))
    launcher.start()
    try:
        assert waits.waiting.wait(10)  # idle: the queue was empty, so it waits
        ref = where.enqueue()
        assert ref is not None
        assert wait_until(lambda: _state(live_app, ref.id) is JobState.SUCCEEDED, 10)
        assert ref.id in waits.leased  # leased by a wait, not by a plain fetch
        assert ran[0].startswith("conveyor-job-")
        assert {t.name for t in waits.threads} == {"conveyor-fetcher"}  # the wait stays put
    finally:
        launcher.stop(10.0)


def test_jobs_leased_by_a_wait_never_run_more_than_the_slots_at_once() -> None:
    """Every peer's concurrency is a hard cap (Sidekiq's ``concurrency``, asynq's
    ``Concurrency``): a wait leases for the free slots only, hands the first job over and
    queues the others, and the next wait starts only when a slot is free."""
    app = Conveyor("memory://")
    gate = threading.Event()
    lock = threading.Lock()
    running = [0, 0]  # now, most at once

    @app.job(name="idle.held")
    def held() -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        gate.wait(30)
        with lock:
            running[0] -= 1

    waits = _Waits(app)
    launcher = Launcher(app, WorkerConfig(concurrency=2, worker_id="idle-2"))
    launcher.start()
    try:
        assert waits.waiting.wait(10)
        refs = [held.enqueue() for _ in range(5)]
        assert wait_until(lambda: running[0] == 2, 10)
        assert launcher.inflight.free == 0  # both slots taken: no wait runs until one frees
        gate.set()
        assert wait_until(lambda: all(
            _state(app, r.id) is JobState.SUCCEEDED for r in refs if r), 20)
        assert running[1] == 2  # never a third at once
    finally:
        gate.set()
        launcher.stop(10.0)
        app.close()


def test_a_shutdown_during_the_wait_ends_the_waiting_thread() -> None:
    """A worker stopped while idle exits (Sidekiq's quiet/stop while processors block in
    ``BRPOP``): the thread waiting for work leaves its wait and ends."""
    app = Conveyor("memory://")
    waits = _Waits(app)
    launcher = Launcher(app, WorkerConfig(concurrency=2, worker_id="idle-3"))
    launcher.start()
    assert waits.waiting.wait(10)
    waiter = waits.threads[0]
    launcher.stop(10.0)
    waiter.join(10)
    assert not waiter.is_alive()  # its wait ended at the quiet


def test_acks_still_ride_with_the_lease_of_a_wait(clock: FakeClock) -> None:
    """Carried acks (BullMQ's ``moveToFinished`` with ``fetchNext``) go with the wait's lease
    as before, and the job that wait leased is handed to the pool and runs."""
    app = Conveyor("memory://", clock=clock)
    ran = threading.Event()

    @app.job(name="idle.noop")
    def noop() -> None:
        ran.set()

    done = noop.enqueue()
    assert done is not None
    [job] = app.storage.dequeue(["default"], "idle-4", 1, 30.0)
    ack = Ack(job.id, job.token, Outcome.SUCCEEDED)
    noop.enqueue()  # ready: the wait returns at once and leases it
    waits = _Waits(app)
    launcher = Launcher(app, WorkerConfig(concurrency=2, worker_id="idle-4"))
    launcher.acker.add(ack)
    launcher.acker.carrier(True)
    launcher.threads.start()
    try:
        assert launcher.fetcher.wait_tick() == 1
        assert waits.acks == [[ack]]  # the pending ack rode with the wait's lease
        assert _state(app, done.id) is JobState.SUCCEEDED
        assert ran.wait(10)  # the job that wait leased was handed over and ran
    finally:
        launcher.threads.stop(5.0)
        app.close()
