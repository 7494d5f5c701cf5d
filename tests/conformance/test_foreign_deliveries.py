"""Brokers deliver, the store decides (docs/brokers.md; issue 49, item 3): ``Outbox.start``
leases a delivered job only when it is a job of the queue the delivery came from. Any other
id — another queue's job (another app's, sharing the store), or no job at all — is
``FOREIGN``: never leased, never taken over, its job left exactly as it was, on every store.

Where the expectation comes from: issue 49 (a message carrying another queue's job id ran it
on a worker that does not serve that queue; a job of another app ended retrying "no job named
...", each message spending one of its retries); Celery and Dramatiq route by queue and a
worker only ever runs what its own queues hold.
"""

from __future__ import annotations

from conveyor.core.job import EventKind, JobState
from conveyor.storage import Backend
from conveyor.storage.outbox import Arrival, StartKind, as_outbox
from tests.conformance.helpers import kinds_of, put


def test_a_delivery_of_another_queues_job_is_foreign_and_never_starts(backend: Backend) -> None:
    theirs = put(backend, "billing")
    ours = put(backend)
    outbox = as_outbox(backend)
    for redelivered in (False, True):
        replies = outbox.start("default", [Arrival(theirs, redelivered, "m1"),
                                           Arrival("no-such-job", redelivered, "m2"),
                                           Arrival(ours, redelivered, "m3")], "w1", 30.0)
        assert [r.kind for r in replies][:2] == [StartKind.FOREIGN, StartKind.FOREIGN]
        assert all(r.job is None for r in replies[:2])
    record = backend.get_job(theirs)
    assert record is not None
    assert (record.state, record.attempt, record.worker) == (JobState.PENDING, 0, None)
    assert kinds_of(backend, theirs) == [EventKind.ENQUEUED]


def test_a_redelivery_never_takes_over_a_running_job_of_another_queue(backend: Backend) -> None:
    theirs = put(backend, "billing")
    outbox = as_outbox(backend)
    [reply] = outbox.start("billing", [Arrival(theirs, False, "m1")], "w1", 30.0)
    assert reply.kind is StartKind.STARTED and reply.job is not None
    [again] = outbox.start("default", [Arrival(theirs, True, "m1")], "w2", 30.0)
    assert again.kind is StartKind.FOREIGN
    record = backend.get_job(theirs)
    assert record is not None
    assert (record.state, record.worker, record.recoveries) == (JobState.ACTIVE, "w1", 0)
