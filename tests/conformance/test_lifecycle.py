"""Every transition of the job lifecycle (DESIGN §2) and the event it records."""

from __future__ import annotations

import json
import threading

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import Event, EventKind, JobSpec, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import (
    ack,
    boom,
    events_of,
    kinds_of,
    last_event,
    new_job_id,
    put,
    spec,
    state_of,
    take,
    take_one,
)


def test_enqueue_stores_a_pending_job_with_an_enqueued_event(backend: Backend) -> None:
    s = spec(args=[1, "two"], max_retries=3, timeout=12.5)
    [result] = backend.enqueue([s])
    assert result.id == s.id and result.created
    record = backend.get_job(s.id)
    assert record is not None
    assert (record.state, record.name, record.queue) == (JobState.PENDING, s.name, "default")
    assert record.payload == s.payload and record.args == [1, "two"]
    assert (record.max_retries, record.timeout, record.attempt, record.errors) == (3, 12.5, 0, 0)
    assert record.created_at == backend.now()
    assert [(e.kind, e.state) for e in record.events or []] == [("enqueued", "pending")]


def test_enqueue_in_the_future_is_scheduled(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend, run_at=clock.now() + 60)
    assert state_of(backend, job_id) is JobState.SCHEDULED
    assert last_event(backend, job_id).kind == EventKind.SCHEDULED
    assert last_event(backend, job_id).state == "scheduled"
    assert take(backend) == []


def test_enqueue_with_run_at_in_the_past_is_pending(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend, run_at=clock.now() - 5)
    assert state_of(backend, job_id) is JobState.PENDING
    assert take_one(backend).id == job_id


def test_enqueue_same_id_twice_is_a_no_op(backend: Backend) -> None:
    s = spec(args=[1])
    assert backend.enqueue([s])[0].created
    again = backend.enqueue([s])[0]
    assert (again.id, again.created) == (s.id, False)
    assert backend.count_jobs() == 1
    assert kinds_of(backend, s.id) == ["enqueued"]


def test_same_id_twice_in_one_call(backend: Backend) -> None:
    s = spec()
    results = backend.enqueue([s, s])
    assert [r.created for r in results] == [True, False]
    assert backend.count_jobs() == 1


def test_dequeue_leases_the_job(backend: Backend, clock: FakeClock) -> None:
    s = spec(args=["x"], max_retries=7, timeout=3.0)
    backend.enqueue([s])
    job = take_one(backend, worker="worker-a", lease=30)
    assert (job.id, job.name, job.queue, job.payload) == (s.id, s.name, "default", s.payload)
    assert (job.attempt, job.errors, job.max_retries, job.timeout) == (1, 0, 7, 3.0)
    assert job.token and job.batch_id is None and job.recoveries == 0
    record = backend.get_job(s.id)
    assert record is not None
    assert record.state is JobState.ACTIVE and record.worker == "worker-a"
    assert record.started_at == clock.now()
    assert record.lease_expires_at is not None and record.lease_expires_at >= clock.now() + 29
    started = last_event(backend, s.id)
    assert (started.kind, started.state, started.attempt) == ("started", "active", 1)
    assert take(backend) == []


def test_each_lease_gets_a_fresh_token(backend: Backend, clock: FakeClock) -> None:
    put(backend)
    first = take_one(backend, lease=10)
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    second = take_one(backend, lease=10)
    assert second.token != first.token
    assert second.attempt == 2


def test_ack_succeeded(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    clock.advance(2)
    assert ack(backend, job, result=json.dumps({"rows": 3}), message="all good")
    record = backend.get_job(job_id)
    assert record is not None
    assert record.state is JobState.SUCCEEDED and record.finished_at == clock.now()
    assert json.loads(record.result or "null") == {"rows": 3}
    assert kinds_of(backend, job_id) == ["enqueued", "started", "succeeded"]
    assert last_event(backend, job_id).state == "succeeded"
    assert take(backend) == []


def test_ack_failed_keeps_the_message_and_never_retries(backend: Backend) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend), Outcome.FAILED, message="seller not qualified")
    record = backend.get_job(job_id)
    assert record is not None
    assert record.state is JobState.FAILED and record.message == "seller not qualified"
    assert record.finished_at is not None
    event = last_event(backend, job_id)
    assert (event.kind, event.state) == ("failed", "failed")
    assert backend.promote_due() == 0 and take(backend) == []


def test_ack_retry_schedules_the_next_run(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    assert ack(backend, job, Outcome.RETRY, error=boom("db down"), retry_in=30)
    record = backend.get_job(job_id)
    assert record is not None
    assert record.state is JobState.RETRYING and record.errors == 1
    assert record.run_at == clock.now() + 30
    event = last_event(backend, job_id)
    assert (event.kind, event.state) == ("error", "retrying")
    assert take(backend) == []
    clock.advance(29)
    assert backend.promote_due() == 0
    clock.advance(1)
    assert backend.promote_due() == 1
    assert state_of(backend, job_id) is JobState.PENDING
    assert last_event(backend, job_id).state == "pending"
    again = take_one(backend)
    assert (again.id, again.attempt, again.errors) == (job_id, 2, 1)


def test_error_events_carry_type_message_and_traceback(backend: Backend) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom("db down"), retry_in=5)
    event = last_event(backend, job_id)
    assert event.data is not None
    assert event.data["type"] == "ValueError"
    assert event.data["message"] == "db down"
    assert "Traceback" in event.data["traceback"]


def test_ack_dead_after_the_last_attempt(backend: Backend) -> None:
    job_id = put(backend, max_retries=0)
    assert ack(backend, take_one(backend), Outcome.DEAD, error=boom("gave up"))
    record = backend.get_job(job_id)
    assert record is not None and record.state is JobState.DEAD
    event = last_event(backend, job_id)
    assert (event.kind, event.state) == ("dead", "dead")
    assert event.data is not None and event.data["message"] == "gave up"
    assert "Traceback" in event.data["traceback"]
    assert backend.count_jobs(state=JobState.DEAD) == 1


def test_ack_cancelled(backend: Backend) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend), Outcome.CANCELLED, message="stopped on request")
    assert state_of(backend, job_id) is JobState.CANCELLED
    assert (last_event(backend, job_id).kind, last_event(backend, job_id).state) == (
        "cancelled", "cancelled")


def test_ack_interrupted_puts_the_job_back_without_an_error(backend: Backend) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend), Outcome.INTERRUPTED)
    record = backend.get_job(job_id)
    assert record is not None and record.state is JobState.PENDING and record.errors == 0
    assert (last_event(backend, job_id).kind, last_event(backend, job_id).state) == (
        "interrupted", "pending")
    again = take_one(backend)
    assert again.id == job_id and again.errors == 0


def test_job_messages_and_progress_are_stored_before_the_final_event(backend: Backend,
                                                                     clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    note = Event(ts=clock.now(), kind=EventKind.MESSAGE, message="row 17: bad phone number")
    assert ack(backend, job, events=(note,), progress=(10, 10))
    events = events_of(backend, job_id)
    assert [e.kind for e in events][-2:] == ["message", "succeeded"]
    assert events[-2].message == "row 17: bad phone number"
    record = backend.get_job(job_id)
    assert record is not None and tuple(record.progress or ()) == (10, 10)


def test_log_appends_while_running_and_is_fenced(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    note = Event(ts=clock.now(), kind=EventKind.MESSAGE, message="halfway")
    assert backend.log(job_id, job.token, [note], progress=(5, 10))
    record = backend.get_job(job_id)
    assert record is not None and tuple(record.progress or ()) == (5, 10)
    assert any(e.message == "halfway" for e in record.events or [])
    assert not backend.log(job_id, "not-the-token", [note])
    assert ack(backend, job)
    assert not backend.log(job_id, job.token, [note], progress=(6, 10))


def test_queues_are_fifo(backend: Backend) -> None:
    ids = [put(backend) for _ in range(5)]
    assert [j.id for j in take(backend, count=10)] == ids


def test_dequeue_takes_queues_in_the_order_given(backend: Backend) -> None:
    low = [put(backend, "low") for _ in range(2)]
    high = [put(backend, "high") for _ in range(2)]
    jobs = take(backend, ["high", "low"], count=3)
    assert [j.id for j in jobs] == [*high, low[0]]
    assert {j.queue for j in jobs} == {"high", "low"}


@pytest.mark.parametrize("expired", [False, True], ids=["plain", "with-a-passed-deadline"])
def test_one_dequeue_answers_queue_by_queue_and_oldest_first(
        backend: Backend, clock: FakeClock, expired: bool) -> None:
    """Jobs of two queues enqueued turn by turn, a queue named twice, a paused one between:
    the answer is the first queue's jobs oldest first, then the next one's. A job past its
    deadline in a named queue (which PostgreSQL answers by another path) changes nothing
    but that job, which ends dead."""
    a, b = [], []
    for _ in range(3):
        a.append(put(backend, "a"))
        b.append(put(backend, "b"))
    put(backend, "paused")
    backend.pause_queue("paused")
    late = put(backend, "late", deadline=clock.now() + 1) if expired else None
    clock.advance(2)
    jobs = take(backend, ["b", "paused", "late", "a", "b"], count=5)
    assert [j.id for j in jobs] == [*b, *a[:2]]
    assert [j.attempt for j in jobs] == [1] * 5
    if late is not None:
        assert state_of(backend, late) == JobState.DEAD


def test_dequeue_ignores_other_queues(backend: Backend) -> None:
    put(backend, "other")
    assert take(backend, ["default"]) == []
    assert take_one(backend, ["other"]).queue == "other"


def test_paused_queue_is_skipped_until_resumed(backend: Backend) -> None:
    put(backend, "a")
    b_id = put(backend, "b")
    backend.pause_queue("a")
    assert [j.id for j in take(backend, ["a", "b"], count=5)] == [b_id]
    assert {q.name: q.paused for q in backend.queues()}["a"] is True
    backend.resume_queue("a")
    assert {q.name: q.paused for q in backend.queues()}["a"] is False
    assert take_one(backend, ["a"]).queue == "a"


def test_bulk_enqueue_of_100000_jobs(backend: Backend) -> None:
    payload = spec().payload
    specs = [JobSpec(id=new_job_id("bulk"), name="tests.bulk", queue="bulk", payload=payload)
             for _ in range(100_000)]
    results = backend.enqueue(specs)
    assert len(results) == 100_000 and all(r.created for r in results)
    assert backend.count_jobs(queue="bulk", state=JobState.PENDING) == 100_000
    stats = {q.name: q for q in backend.queues()}["bulk"]
    assert stats.pending == 100_000
    jobs = take(backend, ["bulk"], count=5)
    assert [j.id for j in jobs] == [s.id for s in specs[:5]]
    assert backend.count_jobs(queue="bulk", state=JobState.ACTIVE) == 5


def test_promote_due_moves_scheduled_jobs_in_time_order(backend: Backend,
                                                        clock: FakeClock) -> None:
    late = put(backend, run_at=clock.now() + 20)
    early = put(backend, run_at=clock.now() + 10)
    clock.advance(10)
    assert backend.promote_due() == 1
    assert state_of(backend, early) is JobState.PENDING
    assert state_of(backend, late) is JobState.SCHEDULED
    clock.advance(10)
    assert backend.promote_due() == 1
    assert [j.id for j in take(backend, count=5)] == [early, late]


def test_promote_due_honours_its_limit(backend: Backend, clock: FakeClock) -> None:
    for _ in range(5):
        put(backend, run_at=clock.now() + 1)
    clock.advance(1)
    assert backend.promote_due(limit=2) == 2
    assert backend.promote_due(limit=10) == 3
    assert backend.count_jobs(state=JobState.PENDING) == 5


def test_enqueued_work_wakes_a_waiting_worker(backend: Backend) -> None:
    got: list[list[str]] = []
    waiter = threading.Thread(target=lambda: got.append(
        [j.id for j in backend.wait_dequeue(["default"], ["default"], "w1", 5, 30.0, 600.0)]),
        daemon=True)
    waiter.start()
    # The waiter may not be blocked yet when a job lands; keep adding work until it wakes.
    ids = []
    for _ in range(400):
        ids.append(put(backend))
        waiter.join(0.05)
        if not waiter.is_alive():
            break
    waiter.join(60.0)  # far below the 600 s asked for: woken (Redis caps one block at 25 s)
    assert not waiter.is_alive()
    assert got[0] and set(got[0]) <= set(ids)


def test_the_event_log_tells_the_whole_story(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend, lease=10), Outcome.RETRY, error=boom(), retry_in=1)
    clock.advance(1)
    assert backend.promote_due() == 1
    take_one(backend, lease=10)
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    assert ack(backend, take_one(backend, lease=10))
    events = events_of(backend, job_id)
    assert [e.state for e in events] == [
        "pending", "active", "retrying", "pending", "active", "pending", "active", "succeeded"]
    kinds = [e.kind for e in events]
    assert kinds[:3] == ["enqueued", "started", "error"]
    assert kinds[4:] == ["started", "recovered", "started", "succeeded"]
    assert [e.attempt for e in events if e.kind == "started"] == [1, 2, 3]
    assert [e.ts for e in events] == sorted(e.ts for e in events)


def test_error_outcomes_keep_the_last_error_on_the_record(backend: Backend,
                                                          clock: FakeClock) -> None:
    job_id = put(backend, max_retries=1)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom("db down"), retry_in=0)
    record = backend.get_job(job_id)
    assert record is not None and (record.errors, record.message) == (1, "db down")
    assert backend.promote_due() == 1
    assert ack(backend, take_one(backend), Outcome.DEAD, error=boom("still down"))
    record = backend.get_job(job_id)
    # The final error is an error attempt too, and its message is what operators see first.
    assert record is not None and (record.errors, record.message) == (2, "still down")
