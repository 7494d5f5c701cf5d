"""BrokerFeed: deliveries become started jobs, an old message never takes a job over from the
live worker that runs it, and a message of another queue's job, or of no job, is dropped."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.broker import open_broker
from conveyor.errors import StorageUnavailable
from conveyor.storage.outbox import Outbox, as_outbox
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.feed import MAX_DELIVERED_ID, BrokerFeed


@contextmanager
def one_job(clock: FakeClock) -> Iterator[tuple[Conveyor, Outbox, str, str,
                                                Callable[[str], BrokerFeed]]]:
    """A memory store holding one pending job of queue ``default`` and a memory broker: the
    app, the outbox, the job's id, the broker's URL, and a maker of a worker's feed."""
    app = Conveyor("memory://", clock=clock)
    try:
        outbox = as_outbox(app.storage)
        ref = app.enqueue("job", queue="default")
        assert ref is not None
        broker_url = f"memory://{uuid.uuid4().hex}"

        def feed(worker_id: str) -> BrokerFeed:
            config = WorkerConfig(queues=(QueueWeight("default"),), worker_id=worker_id)
            return BrokerFeed(open_broker(broker_url), outbox, config)

        yield app, outbox, ref.id, broker_url, feed
    finally:
        app.close()


def test_a_redelivered_old_message_of_a_job_running_here_is_a_duplicate() -> None:
    # Found by the lifecycle model through RabbitMQ: a worker stopped with a pack in hand;
    # the job it handed back was published again and started here, then the pack came back
    # marked redelivered and the old message took the job over from this live worker (a
    # second run of it beside the first, a ``recovered`` event that never happened).
    with one_job(FakeClock()) as (app, outbox, job_id, broker_url, make_feed):
        old, feed = open_broker(broker_url), make_feed("w2")
        old.publish("default", outbox.publish_due("default", 10, 300.0))
        assert [d.job_id for d in old.consume([("default", 0)], 10, 0.0)] == [job_id]
        outbox.publish_failed([job_id])  # as if the first publish was never confirmed
        feed.broker.publish("default", outbox.publish_due("default", 10, 300.0))
        [job] = feed.take(["default"], 10, 0.0)
        old.close()  # the first consumer's connection dies: its message comes back

        assert feed.take(["default"], 10, 0.0) == []
        record = app.get_job(job_id)
        assert record is not None
        assert (record.state.value, record.recoveries, record.attempt) == ("active", 0, 1)
        assert [e.kind for e in record.events or ()] == ["enqueued", "started"]
        assert feed.broker.consume([("default", 0)], 10, 0.0) == []  # the duplicate is settled
        assert feed.held == 1 and job.id == job_id
        feed.close()


def test_an_old_message_reaching_another_worker_does_not_take_the_job_over() -> None:
    # The same old message, but handed to a third worker: its own feed holds nothing of the
    # job, so only the store can tell. The lease started by message 2 carries that message's
    # id; message 1, redelivered, is a duplicate there too (before: a takeover, the job run a
    # second time beside its live first run).
    clock = FakeClock()
    with one_job(clock) as (app, outbox, job_id, broker_url, feed):
        hoarder, runner, third = open_broker(broker_url), feed("w2"), feed("w3")
        hoarder.publish("default", outbox.publish_due("default", 10, 300.0))
        assert [d.job_id for d in hoarder.consume([("default", 0)], 10, 0.0)] == [job_id]
        clock.advance(301)  # never started within republish_after: published again
        runner.broker.publish("default", outbox.publish_due("default", 10, 300.0))
        [job] = runner.take(["default"], 10, 0.0)
        hoarder.close()  # the hoarder dies: message 1 comes back, redelivered

        assert third.take(["default"], 10, 0.0) == []
        record = app.get_job(job_id)
        assert record is not None and record.worker == "w2"
        assert (record.state.value, record.recoveries, record.attempt) == ("active", 0, 1)
        assert third.broker.consume([("default", 0)], 10, 0.0) == []  # settled as a duplicate

        runner.broker.close()  # now the runner's connection dies: message 2 comes back
        [taken] = third.take(["default"], 10, 0.0)
        assert taken.id == job_id and taken.recoveries == 1 and taken.token != job.token
        third.close()


class _Outage:
    """The store's outbox, whose next ``start`` fails as an outage would (a real memory store
    behind it: only the failure is made)."""

    def __init__(self, outbox: Outbox, failures: int) -> None:
        self.outbox = outbox
        self.failures = failures

    def start(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise StorageUnavailable("the store is unreachable")
        return self.outbox.start(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.outbox, name)


def test_deliveries_whose_start_failed_are_started_once_the_store_answers() -> None:
    # A delivery consumed while the store did not answer was neither started nor settled:
    # the broker does not hand it to the same live consumer again, so its job waited for the
    # sweep (republish_after, 300 s) — and on Kafka its offset held the partition's commit
    # point back, and its key's later jobs with it.
    with one_job(FakeClock()) as (app, outbox, job_id, broker_url, _):
        config = WorkerConfig(queues=(QueueWeight("default"),), worker_id="w1")
        feed = BrokerFeed(open_broker(broker_url), _Outage(outbox, 1), config)  # type: ignore[arg-type]
        feed.broker.publish("default", outbox.publish_due("default", 10, 300.0))
        with pytest.raises(StorageUnavailable):
            feed.take(["default"], 10, 0.0)
        [job] = feed.take(["default"], 10, 0.0)
        assert job.id == job_id and feed.held == 1
        record = app.get_job(job_id)
        assert record is not None and record.state.value == "active"
        feed.settle([job_id])
        assert feed.held == 0 and feed.take(["default"], 10, 0.0) == []
        feed.close()


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_delivery_of_another_queues_job_is_dropped_counted_and_never_run(
        store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Issue 49: a broker message carrying the id of a job of a queue this worker does not
    # serve (another app's, say) started it here; its name was unknown, so it ended retrying
    # ("no job named ...") and every such message spent one of its retries. The broker
    # delivers, the store decides: only a job of the delivery's own queue starts.
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path / 'jobs.db'}"
    app = Conveyor(url, clock=FakeClock())
    try:
        theirs = app.enqueue("other_app.bill", queue="billing")
        ours = app.enqueue("job", queue="default")
        assert theirs is not None and ours is not None
        config = WorkerConfig(queues=(QueueWeight("default"),), worker_id="w1")
        feed = BrokerFeed(open_broker(f"memory://{uuid.uuid4().hex}"), as_outbox(app.storage),
                          config)
        feed.broker.publish("default", [theirs.id, "no-such-job", ours.id])
        with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
            started = feed.take(["default"], 10, 0.0)
        assert [job.id for job in started] == [ours.id]
        assert feed.dropped == {"foreign": 2}
        [line] = [r.getMessage() for r in caplog.records if "foreign" in r.getMessage()]
        assert theirs.id in line and "\n" not in line
        record = app.get_job(theirs.id)
        assert record is not None
        assert (record.state.value, record.attempt, record.queue) == ("pending", 0, "billing")
        assert feed.broker.consume([("default", 0)], 10, 0.0) == []  # settled, not handed back
        feed.close()
    finally:
        app.close()


def test_a_delivered_id_no_store_could_hold_is_dropped_before_the_store() -> None:
    # A NUL made PostgreSQL refuse the whole start call: the feed kept the deliveries and
    # tried them again at every call, so one stray message stalled a worker for good.
    with one_job(FakeClock()) as (_, _box, job_id, _url, make_feed):
        feed = make_feed("w1")
        feed.broker.publish("default", ["", "nul\x00id", "x" * (MAX_DELIVERED_ID + 1),
                                        "line\nbreak", job_id])
        [job] = feed.take(["default"], 10, 0.0)
        assert job.id == job_id
        assert feed.dropped == {"malformed": 4}
        assert feed.broker.consume([("default", 0)], 10, 0.0) == []
        feed.close()
