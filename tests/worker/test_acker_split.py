"""A batch of acks the storage refuses for a reason other than an outage is split, so only the
job whose outcome cannot be stored is harmed: it ends dead saying why; the others are acked."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, Event, EventKind, JobState, Outcome
from conveyor.errors import BrokerUnavailable, StorageUnavailable
from conveyor.storage import Backend
from conveyor.worker.acker import Acker
from conveyor.worker.config import WorkerConfig
from tests.conformance.backends import backend_url, open_backend
from tests.conformance.helpers import spec


@pytest.fixture(params=["sqlite", "redis", "redis_cluster"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A real store that refuses text it cannot encode (memory stores Python objects as-is)."""
    name = str(request.param)
    backend = open_backend(name, backend_url(name, tmp_path, request.getfixturevalue),
                           FakeClock())
    try:
        yield backend
    finally:
        backend.close()


def _deep(levels: int) -> object:
    value: object = []
    for _ in range(levels):
        value = [value]
    return value


def test_only_the_job_whose_outcome_cannot_be_stored_is_harmed(store: Backend) -> None:
    specs = [spec() for _ in range(10)]
    store.enqueue(specs)
    jobs = store.dequeue(["default"], "w", 10, 30.0)
    assert len(jobs) == 10
    acks = [Ack(j.id, j.token, Outcome.SUCCEEDED, result="1") for j in jobs]
    # Outcomes no rule above the storage produced (a raw lone surrogate in a result, event
    # data nested past what JSON encoding survives): the storage refuses them.
    acks[3] = Ack(jobs[3].id, jobs[3].token, Outcome.SUCCEEDED, result='"\ud800"')
    deep = Event(ts=0.0, kind=EventKind.MESSAGE, message="deep", data={"v": _deep(100_000)})
    acks[7] = Ack(jobs[7].id, jobs[7].token, Outcome.FAILED, message="no", events=(deep,))
    acker = Acker(store, FakeClock(), WorkerConfig(concurrency=1, worker_id="w"))
    for ack in acks:
        acker.add(ack)
    assert acker.tick() == 10
    assert len(acker) == 0 and acker.refused == 0
    for i, job in enumerate(jobs):
        record = store.get_job(job.id)
        assert record is not None
        if i in (3, 7):
            assert record.state is JobState.DEAD, i
            assert (record.message or "").startswith("could not store outcome"), record.message
        else:
            assert record.state is JobState.SUCCEEDED, i
    # Later acks are not held up behind them.
    store.enqueue([spec()])
    [later] = store.dequeue(["default"], "w", 1, 30.0)
    acker.add(Ack(later.id, later.token, Outcome.SUCCEEDED, result="2"))
    assert acker.tick() == 1 and len(acker) == 0


def test_an_outage_is_never_taken_for_a_bad_outcome(store: Backend,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    store.enqueue([spec() for _ in range(3)])
    jobs = store.dequeue(["default"], "w", 3, 30.0)
    acks = [Ack(j.id, j.token, Outcome.SUCCEEDED, result="1") for j in jobs]

    class Down:
        """The storage, unreachable for the first write."""

        calls = 0

        def ack(self, batch: list[Ack]) -> list[bool]:
            Down.calls += 1
            if Down.calls == 1:
                raise StorageUnavailable("storage down")
            return store.ack(batch)

    acker = Acker(Down(), FakeClock(), WorkerConfig(concurrency=1))  # type: ignore[arg-type]
    for ack in acks:
        acker.add(ack)
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        assert acker.tick() == 0 and len(acker) == 3  # kept whole, not split
    assert Down.calls == 1
    [line] = caplog.records  # an outage is one line, not a traceback
    assert "storage down" in line.getMessage() and line.exc_info is None
    assert acker.tick() == 3 and len(acker) == 0
    assert all(store.get_job(j.id).state is JobState.SUCCEEDED for j in jobs)  # type: ignore[union-attr]


def test_a_broker_that_cannot_settle_never_undoes_written_acks(
        store: Backend, caplog: pytest.LogCaptureFixture) -> None:
    """The outcomes are in the store; settling their deliveries with the broker failed (its
    connection is gone: it hands them out again and the store skips finished jobs). Before,
    the acker took that failure for a bad outcome and wrote every job ``dead`` apart."""
    store.enqueue([spec() for _ in range(2)])
    jobs = store.dequeue(["default"], "w", 2, 30.0)
    acker = Acker(store, FakeClock(), WorkerConfig(concurrency=1))

    def settle(job_ids: list[str]) -> None:
        raise BrokerUnavailable("RabbitMQ at amqp://127.0.0.1:1/: connection closed")

    acker.on_written = settle
    for job in jobs:
        acker.add(Ack(job.id, job.token, Outcome.SUCCEEDED, result="1"))
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        assert acker.tick() == 2 and len(acker) == 0
    assert all(store.get_job(j.id).state is JobState.SUCCEEDED for j in jobs)  # type: ignore[union-attr]
    assert acker.refused == 0
    [line] = caplog.records
    assert "connection closed" in line.getMessage() and line.exc_info is None
