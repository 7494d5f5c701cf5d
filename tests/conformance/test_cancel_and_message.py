"""Two lifecycle rules every backend applies the same way (docs/api.md, "Job lifecycle rules").

A cancel request sticks: once made, an attempt that does not end by itself (an error, a
timeout, a hard shutdown, a lost worker) ends the job ``cancelled``; it never runs again. A
job that finishes (succeeded, or failed by ``Fail``) keeps that outcome.

``message`` is the text of the job's last outcome: every acknowledgement sets it (or clears
it, when the outcome has no text: a success); the storage's own endings set it to their
reason; a retry by hand clears it; nothing else touches it.
"""

from __future__ import annotations

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import EventKind, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import ack, boom, kinds_of, last_event, put, take_one


def _record(backend: Backend, job_id: str):  # type: ignore[no-untyped-def]
    record = backend.get_job(job_id)
    assert record is not None
    return record


# -- a cancel request sticks ---------------------------------------------------------------


@pytest.mark.parametrize("outcome", [Outcome.RETRY, Outcome.DEAD])
def test_an_error_after_a_cancel_request_ends_the_job_cancelled(
    backend: Backend, outcome: Outcome
) -> None:
    job_id = put(backend, max_retries=3)
    job = take_one(backend)
    assert backend.cancel(job_id) is JobState.ACTIVE
    assert ack(backend, job, outcome, error=boom("db down"), retry_in=0)
    record = _record(backend, job_id)
    assert record.state is JobState.CANCELLED
    assert record.errors == 1  # it was an error attempt all the same
    assert record.message == "cancelled: db down"
    final = last_event(backend, job_id)
    assert (final.kind, final.state) == (EventKind.CANCELLED, "cancelled")
    assert final.data is not None and final.data["message"] == "db down"
    assert backend.promote_due() == 0 and backend.dequeue(["default"], "w1", 5, 30) == []


def test_a_hard_shutdown_after_a_cancel_request_ends_the_job_cancelled(backend: Backend) -> None:
    job_id = put(backend)
    job = take_one(backend)
    backend.cancel(job_id)
    assert ack(backend, job, Outcome.INTERRUPTED, message="worker shut down")
    assert _record(backend, job_id).state is JobState.CANCELLED
    assert backend.dequeue(["default"], "w1", 5, 30) == []


def test_a_lost_worker_after_a_cancel_request_ends_the_job_cancelled(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = put(backend)
    take_one(backend, lease=10)
    backend.cancel(job_id)
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    record = _record(backend, job_id)
    assert record.state is JobState.CANCELLED and record.recoveries == 1
    assert record.message == "cancelled: lease expired"
    assert kinds_of(backend, job_id)[-2:] == [EventKind.CANCEL_REQUESTED, EventKind.CANCELLED]
    assert backend.dequeue(["default"], "w1", 5, 30) == []


@pytest.mark.parametrize(("outcome", "state"), [(Outcome.SUCCEEDED, JobState.SUCCEEDED),
                                                (Outcome.FAILED, JobState.FAILED)])
def test_a_job_that_finishes_after_a_cancel_request_keeps_its_outcome(
    backend: Backend, outcome: Outcome, state: JobState
) -> None:
    job_id = put(backend)
    job = take_one(backend)
    backend.cancel(job_id)
    assert ack(backend, job, outcome, message="no" if outcome is Outcome.FAILED else None)
    record = _record(backend, job_id)
    assert record.state is state
    assert record.cancel_requested  # the request stays part of the job's record


def test_a_batch_cancel_sticks_when_its_running_job_errors(backend: Backend) -> None:
    backend.create_batch(__import__("conveyor.core.job", fromlist=["BatchSpec"]).BatchSpec(id="b1"))
    job_id = put(backend, batch_id="b1")
    job = take_one(backend)
    backend.close_batch("b1")
    backend.cancel_batch("b1")
    assert ack(backend, job, Outcome.RETRY, error=boom(), retry_in=0)
    assert _record(backend, job_id).state is JobState.CANCELLED
    status = backend.get_batch("b1")
    assert status is not None and status.complete and status.counts.get("cancelled") == 1


def test_a_retry_by_hand_clears_the_cancel_request(backend: Backend) -> None:
    job_id = put(backend)
    job = take_one(backend)
    backend.cancel(job_id)
    assert ack(backend, job, Outcome.RETRY, error=boom(), retry_in=0)
    assert backend.retry_jobs([job_id]) == 1
    record = _record(backend, job_id)
    assert record.state is JobState.PENDING and not record.cancel_requested
    again = take_one(backend)
    assert ack(backend, again, Outcome.RETRY, error=boom("again"), retry_in=0)
    assert _record(backend, job_id).state is JobState.RETRYING


def test_a_retry_by_hand_keeps_the_jobs_counts(backend: Backend, clock: FakeClock) -> None:
    """``attempt``, ``errors`` and ``recoveries`` are the record of what happened: a retry by
    hand keeps them, so a job whose retry budget is spent ends dead at its next error."""
    job_id = put(backend, max_retries=1)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom(), retry_in=0)
    backend.promote_due()
    take_one(backend, lease=5)
    clock.advance(6)
    assert backend.reclaim_expired() == 1
    assert ack(backend, take_one(backend), Outcome.DEAD, error=boom("again"))
    before = _record(backend, job_id)
    assert (before.attempt, before.errors, before.recoveries) == (3, 2, 1)
    assert backend.retry_jobs([job_id]) == 1
    after = _record(backend, job_id)
    assert (after.attempt, after.errors, after.recoveries) == (3, 2, 1)
    again = take_one(backend)
    assert (again.attempt, again.errors, again.recoveries) == (4, 2, 1)


# -- message: the text of the last outcome -------------------------------------------------


def test_message_is_cleared_when_a_job_succeeds_after_an_error(backend: Backend) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom("db down"), retry_in=0)
    assert backend.promote_due() == 1
    take_one_again = take_one(backend)
    assert _record(backend, job_id).message == "db down"  # the retry runs: still the last one
    assert ack(backend, take_one_again, Outcome.SUCCEEDED, result="1")
    assert _record(backend, job_id).message is None


def test_message_of_each_ending(backend: Backend, clock: FakeClock) -> None:
    failed = put(backend)
    assert ack(backend, take_one(backend), Outcome.FAILED, message="seller not qualified")
    assert _record(backend, failed).message == "seller not qualified"

    dead = put(backend)
    assert ack(backend, take_one(backend), Outcome.DEAD, error=boom("gave up"))
    assert _record(backend, dead).message == "gave up"

    cancelled = put(backend)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom("db down"), retry_in=60)
    assert backend.cancel(cancelled) is JobState.CANCELLED
    assert _record(backend, cancelled).message == "cancelled while waiting"

    killed = put(backend)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom("db down"), retry_in=60)
    assert backend.kill_jobs([killed]) == 1
    assert _record(backend, killed).message == "killed by hand"

    expired = put(backend, deadline=clock.now() + 5)
    clock.advance(10)
    assert backend.dequeue(["default"], "w1", 5, 30) == []
    assert _record(backend, expired).message == "deadline passed before the job could start"

    assert backend.retry_jobs([failed, dead, cancelled, killed, expired]) == 5
    assert [_record(backend, i).message for i in (failed, dead, cancelled, killed, expired)] == [
        None] * 5


def test_message_of_a_poison_job(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom("db down"), retry_in=0)
    backend.promote_due()
    take_one(backend, lease=10)
    clock.advance(11)
    assert backend.reclaim_expired(max_recoveries=0) == 1
    record = _record(backend, job_id)
    assert record.state is JobState.DEAD and record.message == "recovered 1 times (poison job?)"
