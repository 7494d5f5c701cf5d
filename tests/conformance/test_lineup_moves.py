"""A job placed by its queue's lineup (a priority, aging, a fair key or a cost) through every
move in and out of pending, the same on every store (docs/scheduling.md): it is counted and
listed as pending, an operator's cancel takes it out for good, a lost lease, an interrupted
run and a retry by hand put it back with its priority, a durable job woken by its event or
message and a snoozed one come back with it, and a broker's relay publishes it.
On Redis such a job waits in a structure of its own (lua/_lineup.lua), so each move that
touches pending must know it; these tests pin that no move loses or duplicates one."""

from __future__ import annotations

from typing import cast

from conveyor.core.clock import FakeClock
from conveyor.core.job import FlowControl, JobState, LeasedJob, Outcome
from conveyor.core.steps import EVENT, MESSAGE, Message, Wait
from conveyor.storage import Backend
from conveyor.storage.outbox import Arrival, Outbox, StartKind
from tests.conformance.helpers import ack, put, state_of, take, take_one


def _p(priority: int) -> FlowControl:
    return FlowControl(priority=priority)


def test_a_lined_job_is_counted_and_listed_as_pending(backend: Backend) -> None:
    plain = put(backend)
    high = put(backend, flow=_p(5))
    [stats] = [q for q in backend.queues() if q.name == "default"]
    assert stats.pending == 2
    assert backend.count_jobs(state=JobState.PENDING) == 2
    listed = backend.list_jobs(state=JobState.PENDING, queue="default")
    assert sorted(r.id for r in listed) == sorted([plain, high])


def test_a_cancelled_lined_job_leaves_its_lineup_for_good(backend: Backend) -> None:
    """Sidekiq's and every peer's rule for a cancelled waiting job: it never runs; the
    counts stay exact."""
    gone = put(backend, flow=FlowControl(fair_key="a"))
    stays = put(backend, flow=FlowControl(fair_key="b"))
    assert backend.cancel(gone) is JobState.CANCELLED
    [stats] = [q for q in backend.queues() if q.name == "default"]
    assert stats.pending == 1
    assert [j.id for j in take(backend, count=5)] == [stays]
    assert take(backend, count=5) == []


def test_a_lost_lease_puts_a_lined_job_back_with_its_priority(backend: Backend,
                                                              clock: FakeClock) -> None:
    high = put(backend, flow=_p(7))
    stalled = take_one(backend, lease=10)
    assert stalled.id == high
    plain = put(backend)
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    assert [j.id for j in take(backend, count=5)] == [high, plain]


def test_an_interrupted_or_retried_lined_job_comes_back_with_its_priority(
        backend: Backend) -> None:
    first = put(backend, flow=_p(3))
    assert ack(backend, take_one(backend), Outcome.INTERRUPTED)
    plain = put(backend)
    again = take_one(backend)
    assert again.id == first
    assert ack(backend, again, Outcome.DEAD)
    assert backend.retry_jobs([first]) == 1
    assert [j.id for j in take(backend, count=5)] == [first, plain]


def test_a_relay_publishes_lined_jobs_and_a_delivery_starts_them(backend: Backend) -> None:
    """With a broker the store's relay hands every pending job out once, lined ones too
    (in an order of its own: the broker orders the deliveries); none is stranded in its
    lineup."""
    lined = put(backend, flow=FlowControl(fair_key="k", cost=2))
    plain = put(backend)
    outbox = cast(Outbox, backend)
    assert sorted(outbox.publish_due("default", 10, 30.0)) == sorted([plain, lined])
    assert outbox.publish_due("default", 10, 30.0) == []
    [reply] = outbox.start("default", [Arrival(lined, False, None)], "w1", 30.0)
    assert reply.kind is StartKind.STARTED
    assert state_of(backend, lined) is JobState.ACTIVE
    assert state_of(backend, plain) is JobState.PENDING


def _waits(backend: Backend, clock: FakeClock, job: LeasedJob, kind: str, name: str) -> None:
    """The job registers a wait for ``kind``/``name`` and suspends on it (docs/durable.md)."""
    wait = Wait(kind=kind, step=f"wait:{name}", name=name, key="" if kind == MESSAGE else "k",
                until=clock.now() + 60, window=0.0)
    received = backend.durable.receive(job.id, job.token, wait)
    assert received is not None and not received.done
    assert ack(backend, job, Outcome.SUSPENDED, resume_at=wait.until, message="waiting")


def _sent(kind: str, name: str, id_: str) -> Message:
    return Message(id=id_, kind=kind, name=name, key="" if kind == MESSAGE else "k",
                   data="1", sent_at=0.0)


def test_a_lined_durable_job_woken_by_an_event_or_a_message_keeps_its_priority(
        backend: Backend, clock: FakeClock) -> None:
    """A woken durable job is a pending job like any other (docs/durable.md), so it is
    served by its priority (Oban's and Sidekiq's rule: a higher priority starts first),
    once: a delivery that wakes it is one more move into pending."""
    by_event, by_message = put(backend, flow=_p(9)), put(backend, flow=_p(5))
    for job in take(backend, count=2):
        _waits(backend, clock, job, EVENT if job.id == by_event else MESSAGE, "paid")
    plain = put(backend)
    assert backend.durable.send_event(_sent(EVENT, "paid", "e1"), keep=0) == 1
    assert backend.durable.send(by_message, _sent(MESSAGE, "paid", "m1"))
    assert {state_of(backend, by_event), state_of(backend, by_message)} == {JobState.PENDING}
    [stats] = [q for q in backend.queues() if q.name == "default"]
    assert stats.pending == 3
    assert [j.id for j in take(backend, count=5)] == [by_event, by_message, plain]
    assert take(backend, count=5) == []


def test_a_lined_job_answered_while_it_suspends_is_pending_at_once_with_its_priority(
        backend: Backend, clock: FakeClock) -> None:
    """The event came between the wait's registration and the SUSPENDED ack: the ack makes
    the job pending at once (docs/durable.md, "Events"), into its lineup."""
    lined = put(backend, flow=FlowControl(priority=4, fair_key="t"))
    job = take_one(backend)
    wait = Wait(kind=EVENT, step="wait:paid", name="paid", key="k", until=clock.now() + 60,
                window=0.0)
    assert backend.durable.receive(lined, job.token, wait) is not None
    plain = put(backend)
    assert backend.durable.send_event(_sent(EVENT, "paid", "e1"), keep=0) == 1
    assert ack(backend, job, Outcome.SUSPENDED, resume_at=wait.until, message="waiting")
    assert state_of(backend, lined) is JobState.PENDING
    assert [j.id for j in take(backend, count=5)] == [lined, plain]
    assert take(backend, count=5) == []


def test_a_snoozed_lined_job_comes_back_with_its_priority(backend: Backend,
                                                          clock: FakeClock) -> None:
    """RetryAfter (Outcome.SNOOZE) makes it scheduled; promoted, it is back in its lineup."""
    lined = put(backend, flow=_p(6))
    assert ack(backend, take_one(backend), Outcome.SNOOZE, retry_in=5.0)
    plain = put(backend)
    clock.advance(6)
    assert backend.promote_due() == 1
    assert [j.id for j in take(backend, count=5)] == [lined, plain]
    assert take(backend, count=5) == []
