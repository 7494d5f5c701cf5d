"""The store as a broker's outbox (``conveyor.storage.outbox.Outbox``, docs/internals/outbox.md).

With a broker, a relay asks the store which pending jobs to publish (``publish_due``) and a
worker that receives a delivery starts the job in the store (``start``). These tests pin what
every backend must do, black-box, with the fake clock: nothing here needs a broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import (
    Ack,
    BatchSpec,
    EventKind,
    FlowControl,
    JobState,
    LeasedJob,
    Outcome,
)
from conveyor.storage import Backend
from conveyor.storage.outbox import Arrival, Outbox, StartKind, StartReply
from tests.conformance.backends import backend_url, open_backend
from tests.conformance.helpers import (
    ack,
    boom,
    connections,
    kinds_of,
    put,
    run_in_threads,
    spec,
    state_of,
    take_one,
)

AGAIN = 30.0  # republish_after used by these tests

#: The backends that are an outbox so far; Redis and PostgreSQL follow (issue 20). The one
#: place to extend: every test here then runs on them too.
OUTBOX_BACKENDS = ("memory", "sqlite", "postgres", "redis", "redis_cluster")


@pytest.fixture(params=OUTBOX_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path,
            clock: FakeClock) -> Iterator[Backend]:
    """A fresh store of each outbox backend (conftest's ``backend``, narrowed)."""
    name = str(request.param)
    store = open_backend(name, backend_url(name, tmp_path, request.getfixturevalue), clock)
    try:
        yield store
    finally:
        store.close()


def box(store: Backend) -> Outbox:
    """The backend seen as an outbox (every backend is one)."""
    assert isinstance(store, Outbox), f"{type(store).__name__} is not an Outbox"
    return cast(Outbox, store)


def due(store: Backend, queue: str = "default", count: int = 100) -> list[str]:
    return box(store).publish_due(queue, count, AGAIN)


def start(store: Backend, job_id: str, *, redelivered: bool = False, worker: str = "w1",
          queue: str = "default", lease: float = 30.0, message: str | None = None,
          ) -> StartReply:
    replies = box(store).start(queue, [Arrival(job_id, redelivered, message)], worker, lease)
    assert len(replies) == 1 and replies[0].job_id == job_id
    return replies[0]


def started(store: Backend, job_id: str, **kwargs: object) -> LeasedJob:
    reply = start(store, job_id, **kwargs)  # type: ignore[arg-type]
    assert reply.kind is StartKind.STARTED, reply
    assert reply.job is not None and reply.job.id == job_id
    return reply.job


# -- publish_due --------------------------------------------------------------------------------


def test_pending_jobs_are_due_once_oldest_first_and_stay_pending(backend: Backend) -> None:
    ids = [put(backend) for _ in range(5)]
    assert due(backend, count=3) == ids[:3]
    assert due(backend, count=3) == ids[3:]
    assert due(backend) == []
    for job_id in ids:  # the stamp is bookkeeping: readers see a pending job, no event
        assert state_of(backend, job_id) is JobState.PENDING
        assert kinds_of(backend, job_id) == [EventKind.ENQUEUED]


def test_only_the_named_queue_and_only_runnable_jobs(backend: Backend, clock: FakeClock) -> None:
    mine = put(backend, "mail")
    put(backend, "other")
    later = put(backend, "mail", run_at=clock.now() + 10)
    assert due(backend, "mail") == [mine]
    clock.advance(11)  # less than AGAIN: ``mine`` is not due again yet
    assert backend.promote_due() == 1
    assert due(backend, "mail") == [later]


def test_a_job_not_started_is_due_again_after_republish_after(backend: Backend,
                                                              clock: FakeClock) -> None:
    job_id = put(backend)
    assert due(backend) == [job_id]
    clock.advance(AGAIN - 1)
    assert due(backend) == []
    clock.advance(2)
    assert due(backend) == [job_id]  # a message the broker lost is published again
    assert due(backend) == []


def test_publish_failed_makes_a_job_due_again_at_once(backend: Backend) -> None:
    a, b = put(backend), put(backend)
    assert due(backend) == [a, b]
    box(backend).publish_failed([b, "no-such-job"])
    assert due(backend) == [b]


def test_a_paused_queue_has_nothing_due_until_resumed(backend: Backend) -> None:
    job_id = put(backend)
    backend.pause_queue("default")
    assert due(backend) == []
    backend.resume_queue("default")
    assert due(backend) == [job_id]


def test_concurrent_relays_never_get_the_same_job(backend: Backend, clock: FakeClock) -> None:
    ids = {put(backend) for _ in range(120)}
    relays = 4
    got: list[list[str]] = [[] for _ in range(relays)]
    with connections(backend, clock, relays) as stores:
        def relay(slot: int) -> None:
            while batch := box(stores[slot]).publish_due("default", 7, AGAIN):
                got[slot].extend(batch)

        run_in_threads(relay, relays)
    everything = [job_id for batch in got for job_id in batch]
    assert sorted(everything) == sorted(ids)  # each exactly once


# -- start --------------------------------------------------------------------------------------


def test_start_leases_a_published_job_as_dequeue_would(backend: Backend) -> None:
    job_id = put(backend)
    assert due(backend) == [job_id]
    job = started(backend, job_id, worker="w7")
    assert (job.attempt, job.errors, job.recoveries, job.unreadable) == (1, 0, 0, None)
    record = backend.get_job(job_id)
    assert record is not None and record.state is JobState.ACTIVE and record.worker == "w7"
    assert kinds_of(backend, job_id) == [EventKind.ENQUEUED, EventKind.STARTED]
    assert ack(backend, job)
    assert state_of(backend, job_id) is JobState.SUCCEEDED


def test_a_duplicate_delivery_of_a_running_job_is_skipped(backend: Backend) -> None:
    job_id = put(backend)
    job = started(backend, job_id, worker="w1")
    assert start(backend, job_id, worker="w2").kind is StartKind.RUNNING
    record = backend.get_job(job_id)
    assert record is not None and record.worker == "w1" and record.attempt == 1
    assert ack(backend, job)  # the first lease still holds


def test_a_redelivery_takes_a_running_job_over_and_fences_the_old_holder(
        backend: Backend) -> None:
    job_id = put(backend)
    old = started(backend, job_id, worker="w1", lease=600)
    new = started(backend, job_id, redelivered=True, worker="w2", lease=600)
    assert new.token != old.token and new.recoveries == 1
    assert EventKind.RECOVERED in kinds_of(backend, job_id)
    assert not ack(backend, old)  # the zombie's late ack is refused
    assert ack(backend, new)
    assert state_of(backend, job_id) is JobState.SUCCEEDED


def test_an_old_message_of_a_job_published_again_does_not_take_it_over(
        backend: Backend) -> None:
    """Message m1 was handed to a worker that hoarded it unstarted past ``republish_after``;
    the job went out again as m2 and started on w2. The first worker dies, and RabbitMQ hands
    m1 to w3 as redelivered: w2's connection is alive, so m1 is a duplicate, not a takeover."""
    job_id = put(backend)
    holder = started(backend, job_id, worker="w2", message="m2", lease=600)
    assert start(backend, job_id, redelivered=True, message="m1",
                 worker="w3").kind is StartKind.RUNNING
    record = backend.get_job(job_id)
    assert record is not None and record.worker == "w2" and record.recoveries == 0
    assert EventKind.RECOVERED not in kinds_of(backend, job_id)
    # m2 itself redelivered: w2's connection died, so the job is taken over, w2 fenced
    new = started(backend, job_id, redelivered=True, message="m2", worker="w3")
    assert new.recoveries == 1 and new.token != holder.token
    assert not ack(backend, holder)
    # and once more: the new lease was started by m2 too
    newer = started(backend, job_id, redelivered=True, message="m2", worker="w4")
    assert newer.recoveries == 2 and not ack(backend, new)
    assert ack(backend, newer)


def test_a_redelivered_message_never_takes_over_a_job_leased_without_one(
        backend: Backend) -> None:
    job_id = put(backend)
    job = take_one(backend, worker="w1")  # leased by dequeue (a worker with no broker)
    assert job.id == job_id
    assert start(backend, job_id, redelivered=True, message="m1",
                 worker="w2").kind is StartKind.RUNNING
    assert ack(backend, job)


def test_a_redelivered_message_without_an_id_still_takes_over(backend: Backend) -> None:
    """A message published before message ids (an upgrade): the broker's word is taken."""
    job_id = put(backend)
    old = started(backend, job_id, worker="w1", message="m1")
    new = started(backend, job_id, redelivered=True, worker="w2")
    assert new.recoveries == 1 and not ack(backend, old)


def test_a_takeover_past_max_recoveries_ends_dead(backend: Backend) -> None:
    job_id = put(backend)
    started(backend, job_id)
    replies = box(backend).start("default", [(job_id, True)], "w2", 30.0, max_recoveries=0)
    assert replies[0].kind is StartKind.SKIPPED
    assert state_of(backend, job_id) is JobState.DEAD


def test_deliveries_of_finished_or_cancelled_jobs_are_skipped(backend: Backend) -> None:
    done = put(backend)
    assert ack(backend, started(backend, done))
    gone = put(backend)
    assert backend.cancel(gone) is JobState.CANCELLED
    for job_id in (done, gone):
        for redelivered in (False, True):
            assert start(backend, job_id, redelivered=redelivered).kind is StartKind.SKIPPED
    for redelivered in (False, True):  # an id no job of the queue holds: never started here
        assert start(backend, "no-such-job", redelivered=redelivered).kind is StartKind.FOREIGN
    assert state_of(backend, done) is JobState.SUCCEEDED
    assert state_of(backend, gone) is JobState.CANCELLED


def test_a_job_past_its_deadline_is_expired_not_started(backend: Backend,
                                                        clock: FakeClock) -> None:
    job_id = put(backend, deadline=clock.now() + 5)
    assert due(backend) == [job_id]
    clock.advance(6)
    assert start(backend, job_id).kind is StartKind.SKIPPED
    assert state_of(backend, job_id) is JobState.DEAD
    assert kinds_of(backend, job_id)[-1] == EventKind.EXPIRED


def test_one_call_answers_each_delivery_in_order(backend: Backend) -> None:
    a, b = put(backend), put(backend)
    replies = box(backend).start("default", [(a, False), ("nope", False), (b, False),
                                             (a, False)], "w1", 30.0)
    assert [(r.job_id, r.kind) for r in replies] == [
        (a, StartKind.STARTED), ("nope", StartKind.FOREIGN), (b, StartKind.STARTED),
        (a, StartKind.RUNNING)]


def test_one_call_of_every_kind_of_delivery_answers_each_in_its_order(
        backend: Backend, clock: FakeClock) -> None:
    """Plain deliveries mixed with every other kind in one call, as a worker's fetch of many
    messages brings them: each reply where its delivery was, each job moved as if alone."""
    flow = FlowControl(concurrency_key="k", concurrency_limit=1)
    holder = started(backend, put(backend, flow=flow), message="m0")
    gated = put(backend, flow=flow)  # its key is held by ``holder``
    running = put(backend)
    old = started(backend, running, message="m1", lease=600)
    late = put(backend, deadline=clock.now() + 5)
    a, b, c = put(backend), put(backend), put(backend)
    done = put(backend)
    assert ack(backend, started(backend, done))
    clock.advance(6)
    deliveries = [Arrival(b, False, "mb"), Arrival(running, True, "m1"), Arrival(gated, False),
                  Arrival(a, False, "ma"), Arrival(late, False), Arrival(b, True, "mb"),
                  Arrival(done, False), Arrival(c, True, None), Arrival(running, False),
                  Arrival("nope", False)]
    replies = box(backend).start("default", deliveries, "w2", 30.0)
    assert [(r.job_id, r.kind) for r in replies] == [
        (b, StartKind.STARTED), (running, StartKind.STARTED), (gated, StartKind.PARKED),
        (a, StartKind.STARTED), (late, StartKind.SKIPPED), (b, StartKind.RUNNING),
        (done, StartKind.SKIPPED), (c, StartKind.STARTED), (running, StartKind.RUNNING),
        ("nope", StartKind.FOREIGN)]
    jobs = {r.job_id: r.job for r in replies if r.job is not None}
    assert jobs[running].recoveries == 1 and not ack(backend, old)  # taken over, old fenced
    for job_id in (a, b, c, running):
        assert ack(backend, jobs[job_id])
        assert state_of(backend, job_id) is JobState.SUCCEEDED
        assert kinds_of(backend, job_id).count(EventKind.STARTED) >= 1
    assert state_of(backend, late) is JobState.DEAD
    assert state_of(backend, gated) is JobState.PENDING and ack(backend, holder)
    assert due(backend) == [gated]  # the ack freed its key


def test_a_paused_queue_parks_a_delivery_and_publishes_it_after_resume(backend: Backend) -> None:
    job_id = put(backend)
    assert due(backend) == [job_id]
    backend.pause_queue("default")
    assert start(backend, job_id).kind is StartKind.PARKED
    assert state_of(backend, job_id) is JobState.PENDING
    backend.resume_queue("default")
    assert due(backend) == [job_id]
    started(backend, job_id)


# -- a job that goes back to pending is due at once ---------------------------------------------


def test_a_retry_is_due_when_it_is_promoted(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    assert due(backend) == [job_id]
    job = started(backend, job_id)
    assert backend.ack([Ack(job.id, job.token, Outcome.RETRY, error=boom(), retry_in=10)])[0]
    assert due(backend) == []
    clock.advance(11)
    assert backend.promote_due() == 1
    assert due(backend) == [job_id]
    assert started(backend, job_id).attempt == 2


def test_an_expired_lease_and_a_released_worker_make_jobs_due_at_once(
        backend: Backend, clock: FakeClock) -> None:
    a, b = put(backend), put(backend)
    assert due(backend) == [a, b]
    started(backend, a, worker="w1", lease=5)
    started(backend, b, worker="w2", lease=600)
    clock.advance(6)
    assert backend.reclaim_expired() == 1
    assert due(backend) == [a]  # not after republish_after: it became pending again
    assert backend.release_worker("w2") == 1
    assert due(backend) == [b]


def test_an_operator_retry_of_a_dead_job_is_due(backend: Backend) -> None:
    job_id = put(backend, max_retries=0)
    assert due(backend) == [job_id]
    job = started(backend, job_id)
    assert backend.ack([Ack(job.id, job.token, Outcome.DEAD, error=boom())])[0]
    assert state_of(backend, job_id) is JobState.DEAD
    assert backend.retry_jobs([job_id]) == 1
    assert due(backend) == [job_id]


def test_a_job_cancelled_after_its_publish_is_due_again_when_retried(backend: Backend) -> None:
    # Found by the lifecycle model through a broker: the cancel left the publish stamp, so a
    # retry by hand waited ``republish_after`` (5 minutes by default) for its message.
    job_id = put(backend)
    assert due(backend) == [job_id]
    assert backend.cancel(job_id) is JobState.CANCELLED
    assert start(backend, job_id).kind is StartKind.SKIPPED  # its message, consumed
    assert backend.retry_jobs([job_id]) == 1
    assert due(backend) == [job_id]
    assert started(backend, job_id).attempt == 1


# -- flow control: held back in the store, published when the key frees ------------------------


@pytest.mark.parametrize("flow", [FlowControl(concurrency_key="k", concurrency_limit=1),
                                  FlowControl(order_key="k")], ids=["concurrency", "order"])
def test_a_parked_job_is_due_when_the_ack_frees_its_key(backend: Backend,
                                                        flow: FlowControl) -> None:
    first = backend.enqueue([spec(flow=flow)])[0].id
    second = backend.enqueue([spec(flow=flow)])[0].id
    assert due(backend) == [first, second]  # published; the store decides at start
    holder = started(backend, first)
    assert start(backend, second).kind is StartKind.PARKED
    assert due(backend) == []  # parked, not published again while the key is held
    assert ack(backend, holder)
    assert due(backend) == [second]  # the ack freed the key
    started(backend, second)


def test_a_rate_limited_job_is_due_when_its_window_admits_it(backend: Backend,
                                                             clock: FakeClock) -> None:
    flow = FlowControl(rate_key="r", rate_limit=1, rate_period=10.0)
    first = backend.enqueue([spec(flow=flow)])[0].id
    second = backend.enqueue([spec(flow=flow)])[0].id
    assert due(backend) == [first, second]
    started(backend, first)
    assert start(backend, second).kind is StartKind.PARKED
    assert due(backend) == []
    clock.advance(11)
    assert due(backend) == [second]
    started(backend, second)


def test_batch_counters_move_on_start(backend: Backend) -> None:
    backend.create_batch(BatchSpec(id="b1"))
    job_id = backend.enqueue([spec(batch_id="b1")])[0].id
    backend.close_batch("b1")
    assert due(backend) == [job_id]
    job = started(backend, job_id)
    status = backend.get_batch("b1")
    assert status is not None and status.counts.get("active") == 1
    assert not status.counts.get("pending")
    assert ack(backend, job)
    status = backend.get_batch("b1")
    assert status is not None and status.counts.get("succeeded") == 1 and status.complete


# -- bury: a message the broker gave up on ------------------------------------------------------


def test_bury_ends_pending_and_active_jobs_dead_with_the_reason(backend: Backend) -> None:
    backend.create_batch(BatchSpec(id="b2"))
    waiting = backend.enqueue([spec(batch_id="b2")])[0].id
    running = backend.enqueue([spec(batch_id="b2")])[0].id
    done = put(backend)
    backend.close_batch("b2")
    holder = started(backend, running)
    assert ack(backend, started(backend, done))
    reason = "delivery limit reached: the broker gave up on its message"
    assert box(backend).bury([waiting, running, done, "no-such-job"], reason) == 2
    for job_id in (waiting, running):
        record = backend.get_job(job_id)
        assert record is not None and record.state is JobState.DEAD
        assert record.message == reason and kinds_of(backend, job_id)[-1] == EventKind.DEAD
    assert state_of(backend, done) is JobState.SUCCEEDED
    assert not ack(backend, holder)  # the running attempt's late ack is fenced off
    status = backend.get_batch("b2")
    assert status is not None and status.counts.get("dead") == 2 and status.complete
    assert due(backend) == []


def test_published_jobs_are_counted_and_listed_as_pending(backend: Backend) -> None:
    """Handed to a relay or not, a pending job is pending to every reader: counts, pages and
    the queue's size; one cancelled after it was published leaves them exact."""
    ids = [put(backend) for _ in range(5)]
    assert due(backend, count=3) == ids[:3]
    assert backend.count_jobs(state=JobState.PENDING) == 5
    listed = [r.id for r in backend.list_jobs(state=JobState.PENDING, limit=10)]
    assert sorted(listed) == sorted(ids)
    assert [q.pending for q in backend.queues() if q.name == "default"] == [5]
    assert backend.cancel(ids[0]) is JobState.CANCELLED
    assert backend.count_jobs(state=JobState.PENDING) == 4
    assert sorted(r.id for r in backend.list_jobs(state=JobState.PENDING, limit=10)) == sorted(
        ids[1:])
    assert due(backend) == ids[3:]  # the cancelled one is never handed out again


def test_order_keys_are_read_for_a_keyed_broker(backend: Backend) -> None:
    """Kafka keys a job's message by its order key: the relay reads them in one call."""
    keyed = put(backend, flow=FlowControl(order_key="acct:7"))
    plain = put(backend)
    unicode = put(backend, flow=FlowControl(order_key="konto:ø✓", concurrency_key="c",
                                            concurrency_limit=2))
    elsewhere = put(backend, "mail", flow=FlowControl(order_key="acct:9"))
    assert box(backend).order_keys("default", [keyed, plain, "no-such-job", unicode,
                                               elsewhere]) == [
        "acct:7", None, None, "konto:ø✓", None]
    assert box(backend).order_keys("default", []) == []
