"""``RetryAfter``: a job snoozed by its own request waits, then runs again, without spending
its retry budget — the same on every store (``Outcome.SNOOZE``, ``storage/rules.py``).

The expectations come from Oban's snooze (``{:snooze, seconds}``: the job is scheduled again
and the snooze is not counted against ``max_attempts``) and Sidekiq Enterprise's rate
limiter (a worker that raises ``OverLimit`` is rescheduled, not failed, and not retried
against its ``retry`` count).
"""

from __future__ import annotations

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, FlowControl, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import ack, boom, last_event, put, state_of, take, take_one


def test_a_snooze_schedules_the_job_again_without_spending_its_retry_budget(
        backend: Backend, clock: FakeClock) -> None:
    """Oban: a snoozed job goes back to ``scheduled`` for the given seconds and the snooze
    is not an error attempt; the event log says why and for how long."""
    job_id = put(backend, max_retries=1)
    first = take_one(backend)
    assert ack(backend, first, Outcome.SNOOZE, message="HTTP 429, Retry-After: 30",
               retry_in=30.0)
    record = backend.get_job(job_id)
    assert record is not None
    assert (record.state, record.errors, record.attempt) == (JobState.SCHEDULED, 0, 1)
    assert record.run_at == clock.now() + 30.0 and record.worker is not None
    assert record.message == "HTTP 429, Retry-After: 30"
    event = last_event(backend, job_id)
    assert (event.kind, event.state, event.message) == (
        "snoozed", "scheduled", "HTTP 429, Retry-After: 30")
    assert event.data == {"retry_after": 30.0} and event.ts == clock.now()
    assert backend.promote_due() == 0 and take(backend) == []
    clock.advance(30.0)
    assert backend.promote_due() == 1
    again = take_one(backend)
    # The budget is whole: with max_retries=1 an error now is still retried, not dead.
    assert (again.id, again.attempt, again.errors) == (job_id, 2, 0)
    assert ack(backend, again, Outcome.RETRY, error=boom(), retry_in=1.0)
    assert state_of(backend, job_id) is JobState.RETRYING


def test_snoozing_again_and_again_never_spends_an_error(backend: Backend,
                                                        clock: FakeClock) -> None:
    """Sidekiq Enterprise: each OverLimit reschedule leaves the retry count alone."""
    job_id = put(backend, max_retries=0)
    for _ in range(3):
        ack(backend, take_one(backend), Outcome.SNOOZE, retry_in=5.0)
        clock.advance(5.0)
        assert backend.promote_due() == 1
    job = take_one(backend)
    assert (job.id, job.attempt, job.errors) == (job_id, 4, 0)
    assert ack(backend, job)
    assert state_of(backend, job_id) is JobState.SUCCEEDED


def test_a_snooze_frees_the_concurrency_slot_it_held(backend: Backend, clock: FakeClock) -> None:
    """A snoozed job holds no slot while it waits (Sidekiq's limiter reschedules the job and
    lets the others of the key run)."""
    flow = FlowControl(concurrency_key="api", concurrency_limit=1)
    first, second = put(backend, flow=flow), put(backend, flow=flow)
    held = take_one(backend)
    assert held.id == first and take(backend) == []
    assert ack(backend, held, Outcome.SNOOZE, retry_in=60.0)
    assert take_one(backend).id == second


def test_a_job_whose_cancel_was_requested_is_cancelled_not_snoozed(backend: Backend) -> None:
    """A cancelled job must never run again (docs/api.md, "Job lifecycle rules"): a snooze
    is an attempt that did not finish by itself."""
    job_id = put(backend)
    job = take_one(backend)
    assert backend.cancel(job_id) is JobState.ACTIVE
    assert ack(backend, job, Outcome.SNOOZE, message="throttled", retry_in=10.0)
    record = backend.get_job(job_id)
    assert record is not None
    assert (record.state, record.errors) == (JobState.CANCELLED, 0)
    assert record.message == "cancelled: throttled"


def test_a_snooze_is_not_counted_as_a_retry_in_the_totals(backend: Backend) -> None:
    """A snooze is a wait the job asked for, not an outcome: no ``retried`` is counted."""
    put(backend)
    ack(backend, take_one(backend), Outcome.SNOOZE, retry_in=1.0)
    put(backend)
    ack(backend, take_one(backend), Outcome.RETRY, error=boom(), retry_in=1.0)
    [totals] = backend.job_totals()
    assert (totals.retried, totals.processed, totals.failed, totals.dead) == (1, 0, 0, 0)


def test_a_snoozed_job_of_a_batch_is_counted_scheduled_until_it_ends(
        backend: Backend, clock: FakeClock) -> None:
    """The batch waits for a snoozed job: counted ``scheduled``, then done when it ends
    (Sidekiq's batches count a rescheduled job as still pending)."""
    backend.create_batch(BatchSpec(id="b-snooze"))
    job_id = put(backend, batch_id="b-snooze")
    backend.close_batch("b-snooze")
    assert ack(backend, take_one(backend), Outcome.SNOOZE, retry_in=5.0)
    status = backend.get_batch("b-snooze")
    assert status is not None and not status.complete
    assert {k: v for k, v in status.counts.items() if v} == {"scheduled": 1}
    clock.advance(5.0)
    assert backend.promote_due() == 1
    assert ack(backend, take_one(backend))
    status = backend.get_batch("b-snooze")
    assert status is not None and status.complete and state_of(backend, job_id).terminal
