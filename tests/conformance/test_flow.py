"""Flow control enforced by the storage: unique jobs, concurrency limits, ordered keys, rates."""

from __future__ import annotations

import threading

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, FlowControl, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import (
    ack,
    boom,
    put,
    run_in_threads,
    spec,
    state_of,
    take,
    take_one,
)


def _unique(key: str, unique_for: float | None = None) -> FlowControl:
    return FlowControl(unique_key=key, unique_for=unique_for)


def test_unique_job_returns_the_existing_id(backend: Backend) -> None:
    first = backend.enqueue([spec(flow=_unique("report:7"))])[0]
    second = backend.enqueue([spec(flow=_unique("report:7"))])[0]
    assert first.created and (second.id, second.created) == (first.id, False)
    other = backend.enqueue([spec(flow=_unique("report:8"))])[0]
    assert other.created and other.id != first.id
    assert backend.count_jobs() == 2


def test_unique_within_one_bulk_call(backend: Backend) -> None:
    results = backend.enqueue([spec(flow=_unique("k")) for _ in range(3)])
    assert [r.created for r in results] == [True, False, False]
    assert len({r.id for r in results}) == 1


def test_unique_lock_is_held_while_the_job_is_not_terminal(backend: Backend) -> None:
    first = backend.enqueue([spec(flow=_unique("k"))])[0].id
    job = take_one(backend)
    assert backend.enqueue([spec(flow=_unique("k"))])[0].id == first  # active holds it
    assert ack(backend, job, Outcome.RETRY, error=boom(), retry_in=10)
    assert backend.enqueue([spec(flow=_unique("k"))])[0].id == first  # retrying holds it
    assert backend.cancel(first) is JobState.CANCELLED
    again = backend.enqueue([spec(flow=_unique("k"))])[0]
    assert again.created and again.id != first


def test_unique_for_holds_the_lock_after_the_job_finished(backend: Backend,
                                                          clock: FakeClock) -> None:
    first = backend.enqueue([spec(flow=_unique("k", 60))])[0].id
    assert ack(backend, take_one(backend))
    clock.advance(30)
    held = backend.enqueue([spec(flow=_unique("k", 60))])[0]
    assert (held.id, held.created) == (first, False)
    clock.advance(31)
    fresh = backend.enqueue([spec(flow=_unique("k", 60))])[0]
    assert fresh.created and fresh.id != first


def test_unique_for_is_a_minimum_not_a_maximum(backend: Backend, clock: FakeClock) -> None:
    first = backend.enqueue([spec(flow=_unique("k", 10))])[0].id
    clock.advance(100)  # still pending long after unique_for
    assert backend.enqueue([spec(flow=_unique("k", 10))])[0].id == first


def _limited(key: str, limit: int) -> FlowControl:
    return FlowControl(concurrency_key=key, concurrency_limit=limit)


def test_concurrency_limit_per_key(backend: Backend) -> None:
    limited = [put(backend, flow=_limited("tenant-1", 2)) for _ in range(4)]
    free = [put(backend, flow=_limited("tenant-2", 2)) for _ in range(2)]
    plain = put(backend)
    jobs = take(backend, count=10)
    # Over-limit jobs stay pending and do not block later jobs of other keys.
    assert [j.id for j in jobs] == [*limited[:2], *free, plain]
    assert take(backend, count=10) == []
    assert ack(backend, jobs[0])
    assert [j.id for j in take(backend, count=10)] == [limited[2]]
    assert all(state_of(backend, i) is JobState.PENDING for i in limited[3:])
    record = backend.get_job(limited[3])
    assert record is not None and record.attempt == 0


def test_recovery_frees_a_concurrency_slot(backend: Backend, clock: FakeClock) -> None:
    a = put(backend, flow=_limited("k", 1))
    b = put(backend, flow=_limited("k", 1))
    assert take_one(backend, lease=5).id == a
    assert take(backend) == []
    clock.advance(6)
    assert backend.reclaim_expired() == 1
    taken = take_one(backend)
    assert taken.id in {a, b}
    assert take(backend) == []


def test_concurrency_limit_holds_under_concurrent_dequeuers(backend: Backend) -> None:
    limit = 3
    backend.enqueue([spec("busy", flow=_limited("shared", limit)) for _ in range(60)])
    held = [0]
    most = [0]
    guard = threading.Lock()

    def work(slot: int) -> None:
        for _ in range(2000):
            jobs = backend.dequeue(["busy"], f"w{slot}", 2, 60)
            with guard:
                held[0] += len(jobs)
                most[0] = max(most[0], held[0])
            for job in jobs:
                with guard:  # count down before the storage frees the slot
                    held[0] -= 1
                assert backend.ack([Ack(job.id, job.token, Outcome.SUCCEEDED)]) == [True]
            if backend.count_jobs(queue="busy", state=JobState.SUCCEEDED) == 60:
                return

    run_in_threads(work, 6)
    assert 1 <= most[0] <= limit
    assert backend.count_jobs(queue="busy", state=JobState.SUCCEEDED) == 60


def _ordered(key: str) -> FlowControl:
    return FlowControl(order_key=key)


def test_order_key_runs_one_job_at_a_time_in_enqueue_order(backend: Backend) -> None:
    a, b, c = (put(backend, flow=_ordered("account-9")) for _ in range(3))
    other = put(backend, flow=_ordered("account-10"))
    first = take(backend, count=10)
    assert [j.id for j in first] == [a, other]
    assert take(backend, count=10) == []
    assert state_of(backend, b) is JobState.PENDING and state_of(backend, c) is JobState.PENDING
    assert ack(backend, first[0])
    second = take(backend, count=10)
    assert [j.id for j in second] == [b]
    assert ack(backend, second[0])
    assert [j.id for j in take(backend, count=10)] == [c]


def test_a_retrying_job_holds_its_order_key(backend: Backend, clock: FakeClock) -> None:
    a, b = (put(backend, flow=_ordered("k")) for _ in range(2))
    job = take_one(backend)
    assert job.id == a
    assert ack(backend, job, Outcome.RETRY, error=boom(), retry_in=10)
    assert take(backend, count=5) == []  # b must not overtake a
    clock.advance(10)
    assert backend.promote_due() == 1
    again = take_one(backend)
    assert again.id == a
    assert take(backend) == []
    assert ack(backend, again)
    assert take_one(backend).id == b


def test_order_key_moves_on_after_a_failure(backend: Backend) -> None:
    a, b = (put(backend, flow=_ordered("k")) for _ in range(2))
    assert ack(backend, take_one(backend), Outcome.FAILED, message="no")
    assert state_of(backend, a) is JobState.FAILED
    assert take_one(backend).id == b


def _rated(key: str, limit: int, period: float) -> FlowControl:
    return FlowControl(rate_key=key, rate_limit=limit, rate_period=period)


def test_rate_limit_per_period(backend: Backend, clock: FakeClock) -> None:
    ids = [put(backend, flow=_rated("api", 2, 60)) for _ in range(5)]
    other = put(backend, flow=_rated("other-api", 2, 60))
    jobs = take(backend, count=10)
    assert [j.id for j in jobs] == [*ids[:2], other]
    for job in jobs:
        assert ack(backend, job)
    assert take(backend, count=10) == []  # finishing does not give starts back
    clock.advance(30)
    assert take(backend, count=10) == []
    # Over-limit jobs wait without burning attempts or retries.
    record = backend.get_job(ids[2])
    assert record is not None and record.state is JobState.PENDING
    assert (record.attempt, record.errors) == (0, 0)
    clock.advance(31)
    assert [j.id for j in take(backend, count=10)] == ids[2:4]
    clock.advance(61)
    assert [j.id for j in take(backend, count=10)] == ids[4:]
