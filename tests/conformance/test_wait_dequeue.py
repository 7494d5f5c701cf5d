"""``wait_dequeue``: an idle worker's wait and its next lease, one protocol call on every
backend. It always returns the jobs it leased (maybe none); single-server Redis pipelines the
lease behind its blocking wait, the others wait and then lease. Either way the jobs handed
out, and what stays pending, are exactly what ``dequeue`` would give."""

from __future__ import annotations

import threading

from conveyor.core.job import EventKind, JobState, LeasedJob
from conveyor.storage import Backend
from tests.conformance.helpers import events_of, put, state_of


def _wait_take(backend: Backend, watch: list[str], queues: list[str], count: int,
               timeout: float) -> list[LeasedJob]:
    """What a fetcher does when its last fetch came back short."""
    return backend.wait_dequeue(watch, queues, "w1", count, 30.0, timeout)


def test_work_that_arrives_during_the_wait_is_leased(backend: Backend) -> None:
    got: list[list[LeasedJob]] = []
    waiter = threading.Thread(
        target=lambda: got.append(_wait_take(backend, ["default"], ["default"], 5, 20.0)))
    waiter.start()
    # The waiter may not be blocked yet when a job lands; keep adding work until it wakes.
    ids = []
    for _ in range(400):
        ids.append(put(backend))
        waiter.join(0.05)
        if not waiter.is_alive():
            break
    waiter.join()
    leased = {job.id for job in got[0]}
    assert leased and leased <= set(ids)
    for job_id in ids:
        expected = JobState.ACTIVE if job_id in leased else JobState.PENDING
        assert state_of(backend, job_id) is expected
    for job in got[0]:
        started = events_of(backend, job.id)[-1]
        assert (started.kind, started.worker, started.attempt) == (EventKind.STARTED, "w1", 1)
        assert job.token


def test_a_wait_that_times_out_leases_nothing(backend: Backend) -> None:
    assert _wait_take(backend, ["default"], ["default"], 5, 0.2) == []
    assert backend.count_jobs(state=JobState.ACTIVE) == 0


def test_it_takes_at_most_count_and_reaches_every_queue_in_order(backend: Backend) -> None:
    first = [put(backend, "b") for _ in range(2)]
    second = [put(backend, "c") for _ in range(3)]
    jobs = _wait_take(backend, ["a", "b", "c"], ["a", "b", "c"], 4, 0.5)
    assert [j.id for j in jobs] == [*first, *second[:2]]
    assert state_of(backend, second[2]) is JobState.PENDING
    assert backend.count_jobs(state=JobState.ACTIVE) == 4


def test_a_paused_queue_is_skipped(backend: Backend) -> None:
    held = put(backend, "held")
    backend.pause_queue("held")
    assert _wait_take(backend, ["held"], ["held"], 5, 0.2) == []
    assert state_of(backend, held) is JobState.PENDING
    backend.resume_queue("held")
    assert [j.id for j in _wait_take(backend, ["held"], ["held"], 5, 0.2)] == [held]


def test_the_wait_ends_when_work_arrives(backend: Backend) -> None:
    """Woken, not timed out: the wait is far longer than the deadline the test gives it."""
    got: list[list[LeasedJob]] = []
    waiter = threading.Thread(
        target=lambda: got.append(_wait_take(backend, ["default"], ["default"], 1, 600.0)),
        daemon=True)
    waiter.start()
    for _ in range(400):  # the waiter may not be blocked yet when a job lands
        put(backend)
        waiter.join(0.05)
        if not waiter.is_alive():
            break
    waiter.join(60.0)
    assert not waiter.is_alive() and len(got[0]) == 1


def test_nothing_to_take_leases_nothing(backend: Backend) -> None:
    job_id = put(backend)
    assert backend.wait_dequeue(["default"], [], "w1", 5, 30.0, 0.1) == []
    assert backend.wait_dequeue(["default"], ["default"], "w1", 0, 30.0, 0.1) == []
    assert state_of(backend, job_id) is JobState.PENDING
