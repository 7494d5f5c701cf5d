"""An idle worker waits for work on a pool thread, which runs the first job it leases itself
(issue 53, idle latency): no hand-off from the thread that leased the job to the one that runs
it. Sidekiq's processors each block in ``BRPOP`` and run what they pop on the same thread, and
asynq's processor hands a dequeued task to a worker goroutine it already holds: the job starts
where it was fetched. The worker's rules stay: never more jobs at once than its slots, a
shutdown during the wait ends it, jobs leased beside the first still run on the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from conveyor import Conveyor, JobState
from conveyor.core.job import Ack
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.support.waiting import wait_until


class _Waits:
    """Wraps ``storage.wait_dequeue``: the threads that called it, and an event per call."""

    def __init__(self, app: Conveyor) -> None:
        self.threads: list[threading.Thread] = []
        self.leased: dict[str, threading.Thread] = {}  # job id → the thread whose wait leased it
        self.acks: list[list[Ack]] = []
        self.waiting = threading.Event()
        self._wait = app.storage.wait_dequeue
        app.storage.wait_dequeue = self  # type: ignore[method-assign]

    def __call__(self, *args: Any, acks: Sequence[Ack] = (), **kwargs: Any) -> Any:
        self.threads.append(threading.current_thread())
        self.acks.append(list(acks))
        self.waiting.set()
        leases = self._wait(*args, acks=acks, **kwargs)
        self.leased.update((job.id, threading.current_thread()) for job in leases)
        return leases


def test_the_first_job_of_a_wake_runs_on_the_thread_that_leased_it(live_app: Conveyor) -> None:
    """Sidekiq's processor pops and runs on one thread: here the pool thread that waited."""
    ran: list[threading.Thread] = []
    ref: Any = None

    @live_app.job(name="idle.where")
    def where() -> None:
        assert ref is None or ref.id in waits.leased  # the wait returned before it ran
        ran.append(threading.current_thread())

    waits = _Waits(live_app)
    launcher = Launcher(live_app, WorkerConfig(concurrency=2, worker_id="idle-1"))
    launcher.start()
    try:
        assert waits.waiting.wait(10)  # idle: the queue was empty, so it waits
        ref = where.enqueue()
        assert ref is not None
        assert wait_until(lambda: bool(ran), 10)
        assert ran[0] is waits.leased[ref.id]  # no hop to another thread: lease, then start
        assert ran[0].name.startswith("conveyor-job-")  # a pool thread, not the fetcher's
        assert wait_until(lambda: live_app.get_job(ref.id).state is JobState.SUCCEEDED, 10)
    finally:
        launcher.stop(10.0)


def test_jobs_leased_by_a_wait_never_run_more_than_the_slots_at_once() -> None:
    """Every peer's concurrency is a hard cap (Sidekiq's ``concurrency``, asynq's
    ``Concurrency``): a wait leases for the free slots only, runs one job where it is and
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
            app.get_job(r.id).state is JobState.SUCCEEDED for r in refs if r), 20)
        assert running[1] == 2  # never a third at once
    finally:
        gate.set()
        launcher.stop(10.0)
        app.close()


def test_a_shutdown_during_the_wait_ends_the_waiting_thread() -> None:
    """A worker stopped while idle exits (Sidekiq's quiet/stop while processors block in
    ``BRPOP``): the pool thread leaves its wait, nothing it leased after is started."""
    app = Conveyor("memory://")
    waits = _Waits(app)
    launcher = Launcher(app, WorkerConfig(concurrency=2, worker_id="idle-3"))
    launcher.start()
    assert waits.waiting.wait(10)
    waiter = waits.threads[0]
    launcher.stop(10.0)
    waiter.join(10)
    assert not waiter.is_alive()  # the pool let it go: its wait ended at the quiet


def test_acks_still_ride_with_a_lease_made_on_a_pool_thread() -> None:
    """Carried acks (BullMQ's ``moveToFinished`` with ``fetchNext``) go with the wait's lease
    wherever it runs: an ack pending when the wait starts is sent with it."""
    app = Conveyor("memory://")

    @app.job(name="idle.noop")
    def noop() -> None:
        return None

    done = noop.enqueue()
    assert done is not None
    [job] = app.storage.dequeue(["default"], "idle-4", 1, 30.0)
    from conveyor.core.job import Outcome

    ack = Ack(job.id, job.token, Outcome.SUCCEEDED)
    waits = _Waits(app)
    launcher = Launcher(app, WorkerConfig(concurrency=2, worker_id="idle-4"))
    launcher.acker.add(ack)
    launcher.threads.start()
    launcher.fetcher.acker.carrier(True)
    try:
        assert launcher.fetcher.wait_in_pool() == 0  # nothing to lease; the ack rode
        assert waits.acks == [[ack]]
        assert waits.threads[0].name.startswith("conveyor-job-")
        assert app.get_job(done.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    finally:
        launcher.threads.stop(5.0)
        app.close()
