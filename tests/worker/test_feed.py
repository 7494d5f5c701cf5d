"""BrokerFeed: deliveries become started jobs, and an old message never takes a job over
from the live worker that runs it."""

from __future__ import annotations

import uuid

from conveyor import Conveyor, FakeClock
from conveyor.broker import open_broker
from conveyor.storage.outbox import as_outbox
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.feed import BrokerFeed


def test_a_redelivered_old_message_of_a_job_running_here_is_a_duplicate() -> None:
    # Found by the lifecycle model through RabbitMQ: a worker stopped with a pack in hand;
    # the job it handed back was published again and started here, then the pack came back
    # marked redelivered and the old message took the job over from this live worker (a
    # second run of it beside the first, a ``recovered`` event that never happened).
    clock = FakeClock()
    app = Conveyor("memory://", clock=clock)
    try:
        outbox = as_outbox(app.storage)
        ref = app.enqueue("job", queue="default")
        assert ref is not None
        broker_url = f"memory://{uuid.uuid4().hex}"
        config = WorkerConfig(queues=(QueueWeight("default"),), worker_id="w2")
        old, feed = open_broker(broker_url), BrokerFeed(open_broker(broker_url), outbox, config)

        old.publish("default", outbox.publish_due("default", 10, 300.0))
        assert [d.job_id for d in old.consume([("default", 0)], 10, 0.0)] == [ref.id]
        outbox.publish_failed([ref.id])  # as if the first publish was never confirmed
        feed.broker.publish("default", outbox.publish_due("default", 10, 300.0))
        [job] = feed.take(["default"], 10, 0.0)
        old.close()  # the first consumer's connection dies: its message comes back

        assert feed.take(["default"], 10, 0.0) == []
        record = app.get_job(ref.id)
        assert record is not None
        assert (record.state.value, record.recoveries, record.attempt) == ("active", 0, 1)
        assert [e.kind for e in record.events or ()] == ["enqueued", "started"]
        assert feed.broker.consume([("default", 0)], 10, 0.0) == []  # the duplicate is settled
        assert feed.held == 1 and job.id == ref.id
        feed.close()
    finally:
        app.close()
