"""The fetcher carries the acker's pending acks with its next lease (issue 53): one round trip
for a job's outcome and the next job, as BullMQ's worker finishes a job and fetches the next
in one call (``moveToFinished`` with ``fetchNext``). The acker still writes on its own when
no lease comes: none is held while the fetcher blocks in a wait, and a lease that failed
gives its acks back to be written as any batch is (nothing lost, nothing recovered twice).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.core.job import Ack, Outcome
from conveyor.errors import StorageUnavailable
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.support.waiting import wait_until


def _leased_ack(app: Conveyor) -> Ack:
    """The ack of a job this test leased by hand, as a finished job's would be."""
    @app.job(name="carried.noop")
    def noop() -> None:
        return None

    noop.enqueue()
    [job] = app.storage.dequeue(["default"], "test-worker", 1, 30.0)
    return Ack(job.id, job.token, Outcome.SUCCEEDED)


def test_the_next_fetch_carries_the_pending_acks(app: Conveyor, config: WorkerConfig) -> None:
    launcher = Launcher(app, config)
    ack = _leased_ack(app)
    carried: list[Sequence[Ack]] = []
    plain: list[Sequence[Ack]] = []
    dequeue, write = app.storage.dequeue, app.storage.ack

    def recording(*args: Any, acks: Sequence[Ack] = (), **kwargs: Any) -> Any:
        carried.append(list(acks))
        return dequeue(*args, acks=acks, **kwargs)

    def ack_apart(acks: Sequence[Ack]) -> list[bool]:
        plain.append(list(acks))
        return write(acks)

    app.storage.dequeue = recording  # type: ignore[method-assign]
    app.storage.ack = ack_apart  # type: ignore[method-assign]
    launcher.acker.add(ack)
    assert launcher.fetcher.tick() == 0  # nothing to lease; the ack went with the call
    assert carried == [[ack]] and plain == []
    assert len(launcher.acker) == 0 and launcher.acker.written == 1
    assert app.get_job(ack.job_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_more_acks_than_slots_are_written_beside_the_fetch_not_carried(
        app: Conveyor, config: WorkerConfig) -> None:
    """Jobs ending faster than one round trip (no-op jobs) leave more acks pending than the
    worker has slots: carried, they waited behind the lease's script in one pipeline (a no-op
    drain ran 17-22 % slower); the acker writes them beside the fetch. A few acks (jobs that
    wait on I/O end a few at a time) still ride with it."""
    launcher = Launcher(app, config)
    acks = [_leased_ack(app) for _ in range(config.concurrency + 1)]
    for ack in acks:
        launcher.acker.add(ack)
    assert launcher.acker.take() == []  # one more than the slots: the acker's to write
    assert len(launcher.acker) == len(acks)
    launcher.acker.tick()
    assert len(launcher.acker) == 0
    few = [_leased_ack(app) for _ in range(config.concurrency)]
    for ack in few:
        launcher.acker.add(ack)
    assert launcher.acker.take() == few  # as many as the slots: they ride


def test_acks_of_a_failed_fetch_go_back_to_the_acker(app: Conveyor,
                                                     config: WorkerConfig) -> None:
    launcher = Launcher(app, config)
    ack = _leased_ack(app)

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StorageUnavailable("storage down for the test")

    dequeue = app.storage.dequeue
    app.storage.dequeue = down  # type: ignore[method-assign]
    launcher.acker.add(ack)
    with pytest.raises(StorageUnavailable):
        launcher.fetcher.tick()
    # Kept, and its lease still extended by the heartbeat until it is written.
    assert launcher.acker.leases() == {ack.job_id: ack.token}
    app.storage.dequeue = dequeue  # type: ignore[method-assign]
    assert launcher.acker.flush(10.0)
    assert app.get_job(ack.job_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_no_ack_is_held_while_the_fetcher_waits(live_app: Conveyor) -> None:
    """A job that ends while the fetcher blocks in its wait: its ack is the acker's to write
    at once. The hold is far longer than the test may take, so a held ack fails it."""
    blocked, released = threading.Event(), threading.Event()
    wait_dequeue = live_app.storage.wait_dequeue

    def waiting(*args: Any, **kwargs: Any) -> Any:
        # The job is enqueued before the worker starts, so the first fetch (a plain one)
        # leases it; the fetch coming back short, the next is this wait, with a slot free.
        # The wait is the test's: it lasts until the ack is seen written (the store's own
        # 600 s wait cannot be cut short, so the worker's stop would spend its 5 s on it).
        blocked.set()
        released.wait(60)
        call = inspect.signature(wait_dequeue).bind(*args, **kwargs)
        call.arguments["timeout"] = 0.01
        return wait_dequeue(*call.args, **call.kwargs)

    @live_app.job(name="carried.after_wait")
    def after_wait() -> None:
        assert blocked.wait(60)  # ends only once the fetcher went to its wait

    live_app.storage.wait_dequeue = waiting  # type: ignore[method-assign]
    job_id = after_wait.enqueue().id
    launcher = Launcher(live_app, WorkerConfig(concurrency=2, ack_hold=600.0, idle_wait=600.0,
                                               worker_id="carrier"))
    launcher.start()
    try:
        wait_until(lambda: live_app.get_job(job_id).state  # type: ignore[union-attr]
                   is JobState.SUCCEEDED, 60.0, 0.01, "the job's ack to be written")
    finally:
        released.set()
        launcher.stop(5.0)
    assert launcher.acker.refused == 0
