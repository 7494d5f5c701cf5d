"""``Storage.release_worker``: a supervisor saw one of its worker processes die, so that
worker's leases are given up at once instead of when they expire.

It must do for the dead worker's jobs exactly what reclaiming an expired lease does (the same
recovery counting, poison limit, cancel rule, events and batch counters), and fence the old
lease the same way: a late ack, log or heartbeat carrying the dead worker's token is refused.
Other workers' leases are untouched, and the dead worker leaves the registry.
"""

from __future__ import annotations

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, Event, EventKind, FlowControl, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import (
    ack,
    kinds_of,
    last_event,
    new_job_id,
    put,
    spec,
    state_of,
    take,
    take_one,
    worker_info,
)


def test_a_released_job_is_pending_again_for_another_worker(backend: Backend,
                                                            clock: FakeClock) -> None:
    job_id = put(backend)
    dead = take_one(backend, worker="w-dead", lease=60)
    assert backend.release_worker("w-dead") == 1
    record = backend.get_job(job_id)
    assert record is not None
    assert record.state is JobState.PENDING
    assert (record.recoveries, record.errors) == (1, 0)  # a recovery, not an error attempt
    recovered = last_event(backend, job_id)
    assert (recovered.kind, recovered.state) == (EventKind.RECOVERED, "pending")
    assert "worker process died" in (recovered.message or "")
    again = take_one(backend, worker="w-other")
    assert again.id == job_id and again.token != dead.token
    assert (again.attempt, again.errors, again.recoveries) == (2, 0, 1)
    assert ack(backend, again)
    assert state_of(backend, job_id) is JobState.SUCCEEDED


def test_the_dead_workers_late_writes_are_refused(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    dead = take_one(backend, worker="w-dead", lease=60)
    assert backend.release_worker("w-dead") == 1
    fresh = take_one(backend, worker="w-new", lease=60)
    # The lease the dead worker held stopped being valid the moment it was released.
    assert not backend.log(job_id, dead.token, [Event(ts=clock.now(), kind="log", message="x")])
    reply = backend.heartbeat(worker_info(clock, "w-dead"), {dead.id: dead.token}, 60)
    assert reply.lost == frozenset({job_id})
    assert not ack(backend, dead, Outcome.FAILED, message="late result")
    assert EventKind.ACK_REFUSED in kinds_of(backend, job_id)
    assert state_of(backend, job_id) is JobState.ACTIVE  # the new holder's lease stands
    assert ack(backend, fresh, result="2")
    record = backend.get_job(job_id)
    assert record is not None and record.state is JobState.SUCCEEDED and record.result == "2"


def test_only_the_named_workers_leases_are_released(backend: Backend, clock: FakeClock) -> None:
    mine = [put(backend), put(backend, "other")]
    theirs = put(backend, "theirs")
    held = take(backend, ("default", "other"), count=2, worker="w-dead")
    assert {j.id for j in held} == set(mine)
    kept = take_one(backend, ("theirs",), worker="w-alive")
    assert kept.id == theirs
    backend.heartbeat(worker_info(clock, "w-dead"), {j.id: j.token for j in held}, 60)
    backend.heartbeat(worker_info(clock, "w-alive"), {kept.id: kept.token}, 60)
    assert backend.release_worker("w-dead") == 2  # every queue it held a job of
    assert [state_of(backend, j) for j in mine] == [JobState.PENDING, JobState.PENDING]
    assert state_of(backend, theirs) is JobState.ACTIVE
    assert backend.heartbeat(worker_info(clock, "w-alive"), {kept.id: kept.token},
                             60).lost == frozenset()
    assert ack(backend, kept)
    assert [w.id for w in backend.workers()] == ["w-alive"]  # the dead one is unregistered


def test_releasing_a_worker_that_holds_nothing_only_unregisters_it(backend: Backend,
                                                                   clock: FakeClock) -> None:
    job_id = put(backend)
    backend.heartbeat(worker_info(clock, "w-idle"), {}, 60)
    assert backend.release_worker("w-idle") == 0
    assert backend.release_worker("never-seen") == 0
    assert backend.workers() == []
    assert state_of(backend, job_id) is JobState.PENDING
    assert kinds_of(backend, job_id) == [EventKind.ENQUEUED]


def test_release_counts_towards_the_poison_limit(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    for n in range(1, 4):
        take_one(backend, worker=f"w{n}", lease=60)
        assert backend.release_worker(f"w{n}", max_recoveries=2) == 1
        assert state_of(backend, job_id) is (JobState.PENDING if n <= 2 else JobState.DEAD)
    record = backend.get_job(job_id)
    assert record is not None and record.message == "recovered 3 times (poison job?)"
    assert last_event(backend, job_id).kind == EventKind.DEAD
    assert take(backend) == []


def test_a_released_job_with_a_cancel_request_ends_cancelled(backend: Backend) -> None:
    job_id = put(backend)
    take_one(backend, worker="w-dead")
    assert backend.cancel(job_id) is JobState.ACTIVE
    assert backend.release_worker("w-dead") == 1
    record = backend.get_job(job_id)
    assert record is not None and record.state is JobState.CANCELLED and record.recoveries == 1
    assert last_event(backend, job_id).kind == EventKind.CANCELLED
    assert take(backend) == []


def test_release_moves_batch_counters_and_frees_flow_slots(backend: Backend) -> None:
    batch = BatchSpec(id=new_job_id("b"))
    backend.create_batch(batch)
    limited = FlowControl(concurrency_key="k", concurrency_limit=1)
    first = backend.enqueue([spec(flow=limited, batch_id=batch.id)])[0].id
    second = backend.enqueue([spec(flow=limited, batch_id=batch.id)])[0].id
    assert take_one(backend, worker="w-dead").id == first
    assert take(backend, worker="w-other") == []  # the key's one slot is held
    status = backend.get_batch(batch.id)
    assert status is not None and status.counts.get("active") == 1
    assert backend.release_worker("w-dead") == 1
    status = backend.get_batch(batch.id)
    assert status is not None
    assert (status.counts.get("active", 0), status.counts.get("pending")) == (0, 2)
    # The slot is free again: the released job (or its neighbour) can start now.
    assert [j.id for j in take(backend, worker="w-other")] in ([first], [second])
