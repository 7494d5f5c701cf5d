"""Acks carried with the next lease: ``dequeue(..., acks=)`` and ``wait_dequeue(..., acks=)``.

A worker whose job ended sends that job's outcome with its next fetch, in one round trip
(issue 53). The expectation comes from BullMQ, whose worker finishes a job and takes the
next in the same call (``moveToFinished`` with ``fetchNext``): the finish is applied first,
so what it frees is there for the fetch. Here, on every store: the acks are applied before
the lease (a concurrency slot one frees is leased by the same call; a job one hands back is
leased again), each ack's result comes back as ``Storage.ack`` reports it (a stale token is
refused, with its ``ack_refused`` event), and a refused ack fences nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, BatchSpec, EventKind, FlowControl, JobState, Outcome
from conveyor.storage import Backend
from conveyor.storage.base import Leases
from tests.conformance.helpers import kinds_of, new_job_id, put, state_of, take, take_one

Fetch = Callable[[Backend, Sequence[Ack], int], Leases]


def _dequeue(backend: Backend, acks: Sequence[Ack], count: int) -> Leases:
    return backend.dequeue(["default"], "w1", count, 30.0, acks=acks)


def _wait_dequeue(backend: Backend, acks: Sequence[Ack], count: int) -> Leases:
    # A short wait: whether it is woken or times out, the lease is taken after it.
    return backend.wait_dequeue(["default"], ["default"], "w1", count, 30.0, 0.2, acks=acks)


FETCHES = pytest.mark.parametrize("fetch", [_dequeue, _wait_dequeue],
                                  ids=["dequeue", "wait_dequeue"])


def _done(job_id: str, token: str, outcome: Outcome = Outcome.SUCCEEDED) -> Ack:
    return Ack(job_id, token, outcome)


@FETCHES
def test_a_slot_freed_by_a_carried_ack_is_leased_by_the_same_call(
        backend: Backend, fetch: Fetch) -> None:
    limit = FlowControl(concurrency_key="tenant", concurrency_limit=1)
    first = put(backend, flow=limit)
    second = put(backend, flow=limit)
    running = take_one(backend)
    assert running.id == first and take(backend) == []  # the key's one slot is taken
    got = fetch(backend, [_done(first, running.token)], 5)
    assert [job.id for job in got] == [second]
    assert got.acked == [True]
    assert state_of(backend, first) is JobState.SUCCEEDED


@FETCHES
def test_a_stale_carried_ack_is_refused_and_fences_nothing_else(
        backend: Backend, clock: FakeClock, fetch: Fetch) -> None:
    stale_id = put(backend)
    stalled = take_one(backend, worker="w-old", lease=10)
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    fresh = take_one(backend, worker="w-new")
    done_id = put(backend)
    done = take_one(backend)
    waiting = put(backend)
    got = fetch(backend, [_done(stale_id, stalled.token, Outcome.FAILED),
                          _done(done_id, done.token)], 5)
    assert got.acked == [False, True]  # as ``ack`` reports them, in order
    assert [job.id for job in got] == [waiting]
    # The refused one: the new holder's run stands, with the refusal recorded.
    assert state_of(backend, stale_id) is JobState.ACTIVE
    assert kinds_of(backend, stale_id)[-1] == EventKind.ACK_REFUSED
    assert backend.ack([_done(stale_id, fresh.token)]) == [True]
    assert state_of(backend, done_id) is JobState.SUCCEEDED


@FETCHES
def test_a_job_handed_back_by_a_carried_ack_is_leased_again_by_the_same_call(
        backend: Backend, fetch: Fetch) -> None:
    job_id = put(backend)
    job = take_one(backend)
    got = fetch(backend, [Ack(job_id, job.token, Outcome.INTERRUPTED, message="quiet")], 5)
    assert got.acked == [True]
    assert [leased.id for leased in got] == [job_id]
    assert got[0].token != job.token
    assert state_of(backend, job_id) is JobState.ACTIVE


@FETCHES
def test_carried_acks_are_applied_when_nothing_is_leased(backend: Backend, fetch: Fetch) -> None:
    job_id = put(backend)
    job = take_one(backend)
    got = fetch(backend, [_done(job_id, job.token)], 5)
    assert list(got) == [] and got.acked == [True]
    assert state_of(backend, job_id) is JobState.SUCCEEDED
    # No room asked for: the acks still count.
    other = put(backend)
    held = take_one(backend)
    got = backend.dequeue(["default"], "w1", 0, 30.0, acks=[_done(other, held.token)])
    assert list(got) == [] and got.acked == [True]
    assert state_of(backend, other) is JobState.SUCCEEDED


def test_a_carried_ack_of_a_batch_job_moves_its_batch(backend: Backend) -> None:
    """A batch job's outcome counts in its batch however it travels (on Redis its batch is
    counted in a second step, after the lease it came with)."""
    batch_id = new_job_id("b")
    backend.create_batch(BatchSpec(id=batch_id))
    members = [put(backend, batch_id=batch_id) for _ in range(2)]
    backend.close_batch(batch_id)
    first, second = take(backend, count=2)
    got = _dequeue(backend, [_done(first.id, first.token),
                             Ack(second.id, second.token, Outcome.DEAD, message="no")], 5)
    assert got.acked == [True, True] and list(got) == []
    status = backend.get_batch(batch_id)
    assert status is not None
    assert (status.counts.get("succeeded"), status.counts.get("dead")) == (1, 1)
    assert [state_of(backend, m) for m in members] == [JobState.SUCCEEDED, JobState.DEAD]


def test_a_plain_lease_carries_no_ack_results(backend: Backend) -> None:
    put(backend)
    got = backend.dequeue(["default"], "w1", 5, 30.0)
    assert len(got) == 1 and got.acked == []
