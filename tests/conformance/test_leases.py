"""Leases and their fencing, recovery, deadlines, cancellation, the worker registry, and many
dequeuers at once."""

from __future__ import annotations

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, EventKind, FlowControl, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import (
    ack,
    boom,
    events_of,
    kinds_of,
    last_event,
    put,
    run_in_threads,
    spec,
    state_of,
    take,
    take_one,
    worker_info,
)


def test_stale_ack_is_refused_and_the_new_holders_outcome_kept(backend: Backend,
                                                                clock: FakeClock) -> None:
    job_id = put(backend)
    stalled = take_one(backend, worker="w-old", lease=10)
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    fresh = take_one(backend, worker="w-new", lease=10)
    assert fresh.id == job_id and fresh.token != stalled.token
    # The stalled worker wakes up and reports; it must not overwrite the new holder's run.
    assert not ack(backend, stalled, Outcome.FAILED, message="stale result")
    assert state_of(backend, job_id) is JobState.ACTIVE
    assert EventKind.ACK_REFUSED in kinds_of(backend, job_id)
    assert ack(backend, fresh, result="1")
    record = backend.get_job(job_id)
    assert record is not None and record.state is JobState.SUCCEEDED and record.result == "1"
    assert record.message != "stale result"


def test_ack_with_a_wrong_token_is_refused(backend: Backend) -> None:
    job_id = put(backend)
    take_one(backend)
    assert backend.ack([Ack(job_id=job_id, token="forged", outcome=Outcome.SUCCEEDED)]) == [False]
    assert state_of(backend, job_id) is JobState.ACTIVE
    assert last_event(backend, job_id).kind == EventKind.ACK_REFUSED


def test_second_ack_of_the_same_lease_is_refused(backend: Backend) -> None:
    job_id = put(backend)
    job = take_one(backend)
    assert ack(backend, job)
    assert not ack(backend, job, Outcome.FAILED)
    assert state_of(backend, job_id) is JobState.SUCCEEDED


def test_ack_of_an_unknown_job_is_refused(backend: Backend) -> None:
    assert backend.ack([Ack(job_id="nope", token="x", outcome=Outcome.SUCCEEDED)]) == [False]


def test_bulk_ack_answers_per_ack(backend: Backend) -> None:
    ids = [put(backend) for _ in range(3)]
    jobs = take(backend, count=3)
    acks = [Ack(job_id=jobs[0].id, token=jobs[0].token, outcome=Outcome.SUCCEEDED),
            Ack(job_id=jobs[1].id, token="forged", outcome=Outcome.SUCCEEDED),
            Ack(job_id=jobs[2].id, token=jobs[2].token, outcome=Outcome.FAILED, message="no")]
    assert backend.ack(acks) == [True, False, True]
    assert [state_of(backend, i) for i in ids] == [
        JobState.SUCCEEDED, JobState.ACTIVE, JobState.FAILED]


def test_heartbeat_extends_held_leases(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend, lease=10)
    for _ in range(5):
        clock.advance(8)
        reply = backend.heartbeat(worker_info(clock), {job.id: job.token}, 10)
        assert reply.lost == frozenset()
        assert backend.reclaim_expired() == 0
    assert state_of(backend, job_id) is JobState.ACTIVE
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    assert state_of(backend, job_id) is JobState.PENDING


def test_heartbeat_reports_leases_it_no_longer_holds(backend: Backend, clock: FakeClock) -> None:
    kept_id, lost_id = put(backend), put(backend)
    kept, lost = take(backend, count=2, lease=10)
    assert (kept.id, lost.id) == (kept_id, lost_id)
    clock.advance(11)
    backend.reclaim_expired()
    retaken = take(backend, count=2, worker="w2")
    assert {j.id for j in retaken} == {kept_id, lost_id}
    reply = backend.heartbeat(worker_info(clock), {lost.id: lost.token, "gone": "x"}, 10)
    assert reply.lost == frozenset({lost_id, "gone"})
    # A lost lease is not extended for the old holder.
    assert backend.heartbeat(worker_info(clock, "w2"), {j.id: j.token for j in retaken},
                             10).lost == frozenset()


def test_expired_lease_is_recovered_without_counting_an_error(backend: Backend,
                                                              clock: FakeClock) -> None:
    job_id = put(backend)
    take_one(backend, lease=5)
    clock.advance(4)
    assert backend.reclaim_expired() == 0
    clock.advance(2)
    assert backend.reclaim_expired() == 1
    record = backend.get_job(job_id)
    assert record is not None
    assert record.state is JobState.PENDING and record.errors == 0 and record.recoveries == 1
    recovered = last_event(backend, job_id)
    assert (recovered.kind, recovered.state) == ("recovered", "pending")
    again = take_one(backend)
    assert (again.attempt, again.errors, again.recoveries) == (2, 0, 1)


def test_reclaim_honours_its_limit(backend: Backend, clock: FakeClock) -> None:
    for _ in range(4):
        put(backend)
    take(backend, count=4, lease=1)
    clock.advance(2)
    assert backend.reclaim_expired(limit=3) == 3
    assert backend.reclaim_expired(limit=3) == 1
    assert backend.count_jobs(state=JobState.PENDING) == 4


def test_poison_job_goes_dead_after_max_recoveries(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    for n in range(1, 4):
        take_one(backend, lease=1)
        clock.advance(2)
        assert backend.reclaim_expired(max_recoveries=2) == 1
        expected = JobState.PENDING if n <= 2 else JobState.DEAD
        assert state_of(backend, job_id) is expected
    record = backend.get_job(job_id)
    assert record is not None and record.message == "recovered 3 times (poison job?)"
    assert last_event(backend, job_id).state == "dead"
    assert take(backend) == []


def test_deadline_passed_before_start_means_dead_and_never_handed_out(
        backend: Backend, clock: FakeClock) -> None:
    late = put(backend, deadline=clock.now() + 5)
    fine = put(backend, deadline=clock.now() + 60)
    clock.advance(10)
    assert [j.id for j in take(backend, count=5)] == [fine]
    assert state_of(backend, late) is JobState.DEAD
    expired = last_event(backend, late)
    assert (expired.kind, expired.state) == (EventKind.EXPIRED, "dead")


def test_cancel_waiting_jobs(backend: Backend, clock: FakeClock) -> None:
    retrying = put(backend)
    assert ack(backend, take_one(backend), Outcome.RETRY, retry_in=60)
    pending = put(backend)
    scheduled = put(backend, run_at=clock.now() + 100)
    for job_id in (pending, scheduled, retrying):
        assert backend.cancel(job_id) is JobState.CANCELLED
        assert state_of(backend, job_id) is JobState.CANCELLED
        assert (last_event(backend, job_id).kind, last_event(backend, job_id).state) == (
            "cancelled", "cancelled")
    clock.advance(200)
    assert backend.promote_due() == 0
    assert take(backend) == []


def test_cancel_active_job_is_a_request_seen_at_the_next_heartbeat(backend: Backend,
                                                                   clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    assert backend.cancel(job_id) is JobState.ACTIVE
    record = backend.get_job(job_id)
    assert record is not None and record.cancel_requested and record.state is JobState.ACTIVE
    assert last_event(backend, job_id).kind == EventKind.CANCEL_REQUESTED
    reply = backend.heartbeat(worker_info(clock), {job.id: job.token}, 30)
    assert reply.cancel == frozenset({job_id})
    assert ack(backend, job, Outcome.CANCELLED)
    assert state_of(backend, job_id) is JobState.CANCELLED


def test_cancel_finished_or_unknown_job(backend: Backend) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend))
    assert backend.cancel(job_id) is JobState.SUCCEEDED
    assert state_of(backend, job_id) is JobState.SUCCEEDED
    assert backend.cancel("no-such-job") is None


def test_worker_registry_and_remote_commands(backend: Backend, clock: FakeClock) -> None:
    backend.heartbeat(worker_info(clock, "w1", ["a", "b"]), {}, 30)
    backend.heartbeat(worker_info(clock, "w2"), {}, 30)
    workers = {w.id: w for w in backend.workers()}
    assert set(workers) == {"w1", "w2"}
    assert workers["w1"].queues == ("a", "b") and workers["w1"].hostname == "testhost"
    assert workers["w1"].last_seen == clock.now()
    assert backend.command_worker("w1", "quiet")
    assert backend.heartbeat(worker_info(clock, "w2"), {}, 30).command is None
    assert backend.heartbeat(worker_info(clock, "w1"), {}, 30).command == "quiet"
    assert backend.heartbeat(worker_info(clock, "w1"), {}, 30).command is None  # consumed
    assert backend.command_worker("w2", "stop")
    assert backend.heartbeat(worker_info(clock, "w2"), {}, 30).command == "stop"
    backend.unregister_worker("w2")
    assert [w.id for w in backend.workers()] == ["w1"]


def test_silent_workers_drop_out_of_the_registry(backend: Backend, clock: FakeClock) -> None:
    backend.heartbeat(worker_info(clock, "quiet-one"), {}, 30)
    clock.advance(3600)
    backend.heartbeat(worker_info(clock, "alive"), {}, 30)
    assert [w.id for w in backend.workers()] == ["alive"]


def test_worker_status_is_updated_by_each_heartbeat(backend: Backend, clock: FakeClock) -> None:
    backend.heartbeat(worker_info(clock, "w1"), {}, 30)
    backend.heartbeat(worker_info(clock, "w1", status="quiet"), {}, 30)
    assert [(w.id, w.status) for w in backend.workers()] == [("w1", "quiet")]


def test_concurrent_dequeuers_never_get_the_same_job(backend: Backend) -> None:
    backend.enqueue([spec("race") for _ in range(400)])
    seen: list[list[str]] = [[] for _ in range(8)]

    def drain(slot: int) -> None:
        while True:
            jobs = backend.dequeue(["race"], f"w{slot}", 7, 60)
            if not jobs:
                return
            seen[slot].extend(j.id for j in jobs)
            backend.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs])

    run_in_threads(drain, 8)
    every = [job_id for ids in seen for job_id in ids]
    assert len(every) == len(set(every)) == 400
    assert backend.count_jobs(state=JobState.SUCCEEDED, queue="race") == 400


def test_remote_command_for_an_unknown_worker_or_of_an_unknown_kind(backend: Backend,
                                                                    clock: FakeClock) -> None:
    assert backend.command_worker("nobody", "quiet") is False
    backend.heartbeat(worker_info(clock, "w1"), {}, 30)
    with pytest.raises(ValueError):
        backend.command_worker("w1", "explode")
    assert backend.heartbeat(worker_info(clock, "w1"), {}, 30).command is None


def test_ack_of_a_recovered_job_is_refused_and_leaves_it_pending(backend: Backend,
                                                                 clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend, lease=5)
    clock.advance(6)
    assert backend.reclaim_expired() == 1
    assert not ack(backend, job)
    assert state_of(backend, job_id) is JobState.PENDING
    assert kinds_of(backend, job_id)[-1] == EventKind.ACK_REFUSED
    assert take_one(backend).id == job_id


def test_events_are_stamped_with_the_storage_clock(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    clock.advance(7)
    job = take_one(backend)
    clock.advance(5)
    assert ack(backend, job, Outcome.RETRY, error=boom(), retry_in=1)
    stamps = [(e.kind, e.ts) for e in events_of(backend, job_id)]
    start = clock.now() - 12
    assert stamps == [("enqueued", start), ("started", start + 7), ("error", start + 12)]


def test_unique_lock_is_freed_by_kill_and_by_delete(backend: Backend) -> None:
    flow = FlowControl(unique_key="once")
    first = backend.enqueue([spec(flow=flow)])[0].id
    assert backend.kill_jobs([first]) == 1
    second = backend.enqueue([spec(flow=flow)])[0]
    assert second.created and second.id != first
    assert backend.delete_jobs([second.id]) == 1
    assert backend.enqueue([spec(flow=flow)])[0].created
