"""Every ``Inspector`` read and operator action, and retention."""

from __future__ import annotations

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, EventKind, JobState, Outcome
from conveyor.storage import Backend, Retention
from tests.conformance.helpers import (
    ack,
    boom,
    last_event,
    new_job_id,
    put,
    spec,
    state_of,
    take,
    take_one,
    worker_info,
)

DAY = 24 * 3600.0


def _one_of_each(backend: Backend, clock: FakeClock, queue: str = "default") -> dict[str, str]:
    """Jobs in every state on one queue: returns state name -> job id."""
    ids = {name: put(backend, queue) for name in
           ("succeeded", "failed", "dead", "retrying", "cancelled", "active")}
    for name in ("succeeded", "failed", "dead", "retrying", "cancelled", "active"):
        job = take_one(backend, [queue])
        assert job.id == ids[name]
        if name == "succeeded":
            assert ack(backend, job)
        elif name == "failed":
            assert ack(backend, job, Outcome.FAILED, message="no")
        elif name == "dead":
            assert ack(backend, job, Outcome.DEAD, error=boom())
        elif name == "retrying":
            assert ack(backend, job, Outcome.RETRY, error=boom(), retry_in=600)
        elif name == "cancelled":
            assert ack(backend, job, Outcome.CANCELLED)
    ids["pending"] = put(backend, queue)
    ids["scheduled"] = put(backend, queue, run_at=clock.now() + 600)
    return ids


def test_queue_stats(backend: Backend, clock: FakeClock) -> None:
    _one_of_each(backend, clock, "q1")
    put(backend, "q2")
    clock.advance(30)
    stats = {q.name: q for q in backend.queues()}
    assert {"q1", "q2"} <= set(stats)
    q1 = stats["q1"]
    assert (q1.pending, q1.scheduled, q1.active, q1.retrying) == (1, 1, 1, 1)
    assert (q1.processed, q1.failed, q1.dead) == (1, 2, 1)
    assert (q1.processed_today, q1.failed_today) == (1, 2)
    assert q1.latency == pytest.approx(30, abs=1)
    assert not q1.paused
    assert stats["q2"].pending == 1 and stats["q2"].processed == 0


def test_latency_is_zero_for_an_empty_queue(backend: Backend) -> None:
    job_id = put(backend, "q")
    assert ack(backend, take_one(backend, ["q"]))
    assert state_of(backend, job_id) is JobState.SUCCEEDED
    stats = {q.name: q for q in backend.queues()}["q"]
    assert stats.pending == 0 and stats.latency == 0


def test_a_paused_queue_is_listed_even_when_empty(backend: Backend) -> None:
    backend.pause_queue("idle")
    assert {q.name: q.paused for q in backend.queues()}.get("idle") is True


def test_job_totals_per_queue_and_name(backend: Backend) -> None:
    backend.enqueue([spec("q", name="a") for _ in range(4)] + [spec("q", name="b")])
    a1, a2, a3, a4, b1 = take(backend, ["q"], count=5)
    assert ack(backend, a1) and ack(backend, b1)
    assert ack(backend, a2, Outcome.FAILED, message="no")
    assert ack(backend, a3, Outcome.RETRY, error=boom(), retry_in=10)
    assert ack(backend, a4, Outcome.DEAD, error=boom())
    totals = {(t.queue, t.name): t for t in backend.job_totals()}
    a = totals[("q", "a")]
    assert (a.processed, a.failed, a.dead, a.retried) == (1, 1, 1, 1)
    b = totals[("q", "b")]
    assert (b.processed, b.failed, b.dead, b.retried) == (1, 0, 0, 0)


def test_get_job_has_the_full_record(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend, args=[{"row": 1}], deadline=clock.now() + 100)
    take_one(backend)
    record = backend.get_job(job_id)
    assert record is not None
    assert record.args == [{"row": 1}] and record.deadline == clock.now() + 100
    assert [e.kind for e in record.events or []] == ["enqueued", "started"]
    assert backend.get_job("missing") is None


def test_list_and_count_by_state_and_queue(backend: Backend, clock: FakeClock) -> None:
    ids = _one_of_each(backend, clock, "q1")
    other = put(backend, "q2")
    for state in JobState:
        if state in (JobState.WAITING, JobState.AGGREGATING):
            continue  # listed and counted in test_workflows.py and test_aggregation.py
        listed = backend.list_jobs(state=state, queue="q1")
        assert [r.id for r in listed] == [ids[state.value]]
        assert listed[0].state is state and listed[0].events is None
        assert backend.count_jobs(state=state, queue="q1") == 1
    assert backend.count_jobs(queue="q1") == 8
    assert backend.count_jobs() == 9
    assert backend.count_jobs(state=JobState.PENDING) == 2
    assert [r.id for r in backend.list_jobs(queue="q2")] == [other]
    with_events = backend.list_jobs(state=JobState.SUCCEEDED, with_events=True)
    assert [e.kind for e in with_events[0].events or []] == ["enqueued", "started", "succeeded"]


def test_list_jobs_pages_oldest_first(backend: Backend) -> None:
    ids = [put(backend) for _ in range(7)]
    pages = [backend.list_jobs(offset=o, limit=3) for o in (0, 3, 6, 9)]
    assert [[r.id for r in page] for page in pages] == [ids[:3], ids[3:6], ids[6:], []]


def test_retry_jobs_by_hand(backend: Backend, clock: FakeClock) -> None:
    ids = _one_of_each(backend, clock)
    retried = [ids[s] for s in ("dead", "failed", "cancelled", "retrying")]
    untouched = [ids[s] for s in ("succeeded", "active", "pending", "scheduled")]
    assert backend.retry_jobs(retried + untouched + ["missing"]) == 4
    for job_id in retried:
        assert state_of(backend, job_id) is JobState.PENDING
        event = last_event(backend, job_id)
        assert (event.kind, event.state) == (EventKind.RETRIED, "pending")
    assert [state_of(backend, i).value for i in untouched] == [
        "succeeded", "active", "pending", "scheduled"]
    taken = {j.id for j in take(backend, count=10)}
    assert set(retried) | {ids["pending"]} == taken


def test_delete_jobs_skips_active_ones(backend: Backend, clock: FakeClock) -> None:
    ids = _one_of_each(backend, clock)
    assert backend.delete_jobs([*list(ids.values()), "missing"]) == 7
    assert backend.get_job(ids["active"]) is not None
    assert all(backend.get_job(i) is None for s, i in ids.items() if s != "active")
    assert backend.count_jobs() == 1
    assert take(backend) == []
    clock.advance(1000)
    assert backend.promote_due() == 0


def test_kill_jobs_moves_waiting_jobs_to_dead(backend: Backend, clock: FakeClock) -> None:
    ids = _one_of_each(backend, clock)
    waiting = [ids[s] for s in ("pending", "scheduled", "retrying")]
    assert backend.kill_jobs([*waiting, ids["active"], ids["succeeded"]]) == 3
    for job_id in waiting:
        assert state_of(backend, job_id) is JobState.DEAD
        event = last_event(backend, job_id)
        assert (event.kind, event.state) == (EventKind.KILLED, "dead")
    assert state_of(backend, ids["active"]) is JobState.ACTIVE
    assert backend.count_jobs(state=JobState.DEAD) == 4


def test_retry_all_and_clear(backend: Backend) -> None:
    for queue in ("a", "a", "b"):
        put(backend, queue)
    for job in take(backend, ["a", "b"], count=3):
        assert ack(backend, job, Outcome.DEAD, error=boom())
    assert backend.retry_all(JobState.DEAD, queue="a") == 2
    assert backend.count_jobs(state=JobState.PENDING, queue="a") == 2
    assert backend.count_jobs(state=JobState.DEAD) == 1
    assert backend.clear(JobState.DEAD) == 1
    assert backend.count_jobs(state=JobState.DEAD) == 0
    assert backend.count_jobs() == 2
    for job in take(backend, ["a"], count=2):
        assert ack(backend, job, Outcome.FAILED, message="no")
    assert backend.retry_all(JobState.FAILED) == 2
    assert backend.count_jobs(state=JobState.PENDING) == 2


def test_trim_removes_finished_work_past_retention(backend: Backend, clock: FakeClock) -> None:
    old_ok, old_failed = put(backend), put(backend)
    assert ack(backend, take_one(backend))
    assert ack(backend, take_one(backend), Outcome.FAILED, message="no")
    clock.advance(2 * DAY)
    new_ok, waiting = put(backend), put(backend, run_at=clock.now() + 10 * DAY)
    assert ack(backend, take_one(backend))
    backend.heartbeat(worker_info(clock, "silent"), {}, 30)
    retention = Retention(succeeded_seconds=DAY, failed_seconds=3 * DAY, worker_ttl=60)
    clock.advance(120)
    assert backend.trim(retention) == 1
    assert backend.get_job(old_ok) is None
    assert all(backend.get_job(i) is not None for i in (old_failed, new_ok, waiting))
    assert backend.workers() == []
    clock.advance(2 * DAY)
    assert backend.trim(retention) == 2
    assert backend.get_job(waiting) is not None and backend.count_jobs() == 1


def test_trim_keeps_at_most_dead_max_dead_jobs(backend: Backend, clock: FakeClock) -> None:
    ids = [put(backend) for _ in range(5)]
    for job in take(backend, count=5):
        assert ack(backend, job, Outcome.DEAD, error=boom())
        clock.advance(1)
    assert backend.trim(Retention(dead_max=2)) == 3
    assert [r.id for r in backend.list_jobs(state=JobState.DEAD)] == ids[3:]


def test_clear_refuses_states_that_are_not_finished(backend: Backend) -> None:
    put(backend)
    with pytest.raises(ValueError):
        backend.clear(JobState.PENDING)
    assert backend.count_jobs() == 1


def test_today_counts_start_again_the_next_day(backend: Backend, clock: FakeClock) -> None:
    for _ in range(3):
        put(backend, "daily")
    assert ack(backend, take_one(backend, ["daily"]))
    assert ack(backend, take_one(backend, ["daily"]), Outcome.FAILED, message="no")
    clock.advance(DAY + 1)
    assert ack(backend, take_one(backend, ["daily"]))
    stats = {q.name: q for q in backend.queues()}["daily"]
    assert (stats.processed, stats.failed) == (2, 1)
    assert (stats.processed_today, stats.failed_today) == (1, 0)


def test_a_job_cancelled_then_retried_by_hand_is_listed_and_counted_once(
        backend: Backend) -> None:
    job_id = put(backend)
    assert backend.cancel(job_id) is JobState.CANCELLED
    assert backend.retry_jobs([job_id]) == 1
    listed = backend.list_jobs(state=JobState.PENDING, queue="default")
    assert [r.id for r in listed] == [job_id]
    assert backend.count_jobs(state=JobState.PENDING, queue="default") == 1
    assert [j.id for j in backend.dequeue(["default"], "w", 10, 60.0)] == [job_id]
    assert backend.dequeue(["default"], "w", 10, 60.0) == []


def test_list_jobs_newest_first_pages_the_other_way(backend: Backend, clock: FakeClock) -> None:
    batch = BatchSpec(id=new_job_id("b"))
    backend.create_batch(batch)
    ids = []
    for n in range(7):  # enqueued one at a time, a tick apart: oldest first is this order
        ids.append(put(backend, "q1" if n % 2 else "q2", batch_id=batch.id))
        clock.advance(1)
    newest = list(reversed(ids))
    for filters in ({}, {"queue": "q1"}, {"state": JobState.PENDING},
                    {"state": JobState.PENDING, "queue": "q2"}, {"batch_id": batch.id}):
        want = [i for i in newest if i in {r.id for r in backend.list_jobs(limit=100,
                                                                        **filters)}]
        pages = [[r.id for r in backend.list_jobs(newest_first=True, offset=o, limit=2,
                                                  **filters)] for o in range(0, 8, 2)]
        assert [i for page in pages for i in page] == want, filters
