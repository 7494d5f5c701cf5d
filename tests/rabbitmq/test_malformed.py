"""Messages conveyor never sent, on a real RabbitMQ node: settled and counted, never handed out,
never back at the next worker start (issue 49, item 3).

Where the expectation comes from: issue 49 (a pack of 200,000 nested ``[`` raised
``RecursionError`` in the consumer callback, so the message stayed unacknowledged and came back
at every worker start); RabbitMQ's own advice that a consumer settles a message it cannot
process rather than leave it to be redelivered forever (a poison message).
"""

from __future__ import annotations

import logging
import uuid

import aio_pika
import pytest

from conveyor.broker import open_broker
from conveyor.broker.rabbitmq.broker import RabbitBroker
from conveyor.broker.rabbitmq.packs import PACKED
from tests.support.rabbitmq import RabbitServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.rabbitmq

MALFORMED = ["[" * 200_000, "not json", "[1, 2]", "[]", '{"a": "b"}',
             '["x"' + ', "x"' * 5000 + "]"]


def _publish_raw(broker: RabbitBroker, queue: str, body: str) -> None:
    async def send() -> None:
        await broker._publisher.default_exchange.publish(
            aio_pika.Message(body.encode(), content_type=PACKED), routing_key=broker.name(queue))

    broker._call(send())


def test_a_malformed_message_is_dropped_and_counted_never_redelivered(
        rabbitmq_server: RabbitServer, caplog: pytest.LogCaptureFixture) -> None:
    url = f"{rabbitmq_server.url}?prefix=t{uuid.uuid4().hex[:10]}&timeout=5"
    first = open_broker(url)
    assert isinstance(first, RabbitBroker)
    try:
        assert first.consume([("default", 0)], 1, 0) == []  # subscribed
        with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
            for body in MALFORMED:
                _publish_raw(first, "default", body)
            first.publish("default", ["good"])
            got = first.consume([("default", 0)], 10, 10)
            assert [d.job_id for d in got] == ["good"]
            first.ack(got)
            wait_until(lambda: first.malformed == len(MALFORMED), 10, what="all counted")
        lines = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
        assert len(lines) == len(MALFORMED) and all("\n" not in line for line in lines)
        assert any("nested too deeply" in line for line in lines)
    finally:
        first.close()
    second = open_broker(url)  # the next worker start: nothing comes back
    assert isinstance(second, RabbitBroker)
    try:
        assert second.consume([("default", 0)], 10, 1.0) == []
        assert second.malformed == 0 and second.backlog("default") == 0
    finally:
        second.close()
