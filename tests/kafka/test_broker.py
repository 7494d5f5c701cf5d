"""conveyor's Kafka broker (``kafka://``) against a real Kafka-wire broker: Tansu, through
confluent-kafka. Every test has topics and a consumer group of its own."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka", reason="make test installs confluent-kafka")

from conveyor.broker import Delivery, open_broker
from conveyor.broker.kafka.broker import KafkaBroker
from conveyor.errors import BrokerUnavailable, BrokerURLError
from tests.cli.conftest import conveyor
from tests.support.kafka import TansuServer

pytestmark = pytest.mark.kafka

Opener = Callable[..., KafkaBroker]


@pytest.fixture
def open_kafka(kafka_server: TansuServer) -> Iterator[Opener]:
    """Opens brokers on one fresh prefix (same topics, same group); closes them all."""
    prefix = f"k{uuid.uuid4().hex[:8]}"
    opened: list[KafkaBroker] = []

    def make(**options: object) -> KafkaBroker:
        broker = open_broker(kafka_server.broker_url(prefix, **options))
        assert isinstance(broker, KafkaBroker)
        opened.append(broker)
        return broker

    yield make
    for broker in opened:
        broker.close()


def _take(broker: KafkaBroker, want: int, timeout: float = 30.0,
          queues: tuple[str, ...] = ("default",)) -> list[Delivery]:
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += broker.consume([(q, 0) for q in queues], want - len(got), 0.2)
    return got


def test_published_jobs_are_delivered_once_and_one_key_stays_in_order(
        open_kafka: Opener) -> None:
    broker = open_kafka()
    ids = [f"job-{i:03d}" for i in range(60)]
    keys = [f"acct:{i % 3}" if i % 2 else None for i in range(60)]
    assert broker.publish("default", ids, keys) == [True] * 60
    got = _take(broker, 60)
    assert sorted(d.job_id for d in got) == ids  # each exactly once
    assert _take(broker, 1, timeout=1.0) == []
    for key in {k for k in keys if k}:
        mine = [d for d in got if keys[ids.index(d.job_id)] == key]
        assert len({d.handle.partition for d in mine}) == 1  # type: ignore[attr-defined]
        assert [d.job_id for d in mine] == sorted(d.job_id for d in mine)  # in order
    assert all(d.message_id and not d.redelivered for d in got)


def test_the_commit_point_waits_for_the_oldest_unfinished_message(open_kafka: Opener) -> None:
    first = open_kafka(partitions=1)
    ids = [f"j{i:02d}" for i in range(20)]
    assert all(first.publish("default", ids))
    got = _take(first, 20)
    slow = got[3]
    first.ack([d for d in got if d is not slow])  # everything but one is done
    first.close()  # leaves the group, committing below the slow one only
    second = open_kafka(partitions=1)
    again = _take(second, 20 - 3)
    assert [d.job_id for d in again] == ids[3:]  # from the unfinished one on, nothing before
    assert _take(second, 1, timeout=1.0) == []


def test_a_consumer_that_acked_everything_hands_nothing_back(open_kafka: Opener) -> None:
    first = open_kafka(partitions=2)
    assert all(first.publish("default", [f"a{i}" for i in range(10)]))
    first.ack(_take(first, 10))
    first.close()
    second = open_kafka(partitions=2)
    assert all(second.publish("default", ["late"]))
    assert [d.job_id for d in _take(second, 1)] == ["late"]
    assert _take(second, 1, timeout=1.0) == []


def test_release_produces_the_message_again(open_kafka: Opener) -> None:
    broker = open_kafka(partitions=1)
    assert all(broker.publish("default", ["x", "y"]))
    got = _take(broker, 2)
    broker.release([got[0]])
    broker.ack([got[1]])
    back = _take(broker, 1)
    assert [d.job_id for d in back] == ["x"] and back[0].message_id != got[0].message_id


def test_a_slow_message_does_not_hold_back_the_partition_beyond_the_window(
        open_kafka: Opener) -> None:
    broker = open_kafka(partitions=1, window=8)
    assert all(broker.publish("default", [f"m{i:02d}" for i in range(30)]))
    got = _take(broker, 8)
    head = got[0]
    broker.ack(got[1:])
    # the window is full (8 past the commit point, held by the head): the partition pauses
    assert _take(broker, 1, timeout=1.5) == []
    broker.ack([head])
    assert len(_take(broker, 22)) == 22  # resumed once the head finished


def test_the_backlog_counts_what_no_consumer_has_read(open_kafka: Opener) -> None:
    relay = open_kafka()
    assert relay.backlog("default") == 0
    # One message a publish: Tansu reports a partition's end as one past the first message
    # of its last record batch (docs/brokers.md), so many at once would count low.
    for i in range(12):
        assert relay.publish("default", [f"b{i}"]) == [True]
    assert relay.backlog("default") == 12
    consumer = open_kafka()
    got = _take(consumer, 12)
    assert len(got) == 12
    # read, not yet finished: no longer waiting (the read positions land within 0.1 s)
    consumer.consume([("default", 0)], 1, 0.3)
    deadline = time.monotonic() + 10
    while relay.backlog("default") and time.monotonic() < deadline:
        consumer.consume([("default", 0)], 1, 0.2)
    assert relay.backlog("default") == 0 and relay.dead_lettered() == []


@pytest.mark.parametrize(("url", "says"), [
    ("kafka://", "names no host"),
    ("kafka://h1:9092,,h2:9092", "names no host"),
    ("kafka://h:9092?partitions=many", "partitions='many' is not a number"),
    ("kafka://h:9092?prefix=x", "unknown option 'prefix'"),
])
def test_a_malformed_url_is_refused_before_connecting(url: str, says: str) -> None:
    with pytest.raises(BrokerURLError, match=says):
        open_broker(url)


def test_credentials_become_sasl_settings_and_never_show(kafka_server: TansuServer) -> None:
    from conveyor.broker.kafka.url import parse_kafka_url

    settings = parse_kafka_url("kafkas://app:s%40cret@k1:9092,k2:9092?sasl.mechanism=SCRAM-SHA-512")
    assert settings.bootstrap == "k1:9092,k2:9092"
    assert settings.client == {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "app",
                               "sasl.password": "s@cret", "security.protocol": "SASL_SSL"}
    with pytest.raises(BrokerURLError) as caught:
        open_broker("kafka://app:s3cret@h:9092?nope=1")
    assert "s3cret" not in str(caught.value)


def test_an_unreachable_broker_is_one_line_at_open() -> None:
    from tests.support.postgres_server import free_port

    with pytest.raises(BrokerUnavailable) as caught:
        open_broker(f"kafka://app:not-the-password@127.0.0.1:{free_port()}?timeout=1")
    text = str(caught.value)
    assert "cannot connect" in text and "\n" not in text and "not-the-password" not in text


@pytest.mark.parametrize("processes", ["1", "2"], ids=["single", "supervised"])
def test_conveyor_worker_with_a_broker_it_cannot_reach_says_so_in_one_line(
        tmp_path: Path, processes: str) -> None:
    from tests.support.postgres_server import free_port

    bad = f"kafka://127.0.0.1:{free_port()}?timeout=1"
    proc = conveyor("worker", "tests.cli.sample_app:app", "--processes", processes,
                    "--broker", bad, url=f"sqlite:///{tmp_path}/w.db")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("conveyor: error:") and "cannot connect" in lines[-1]
    assert "Traceback" not in proc.stderr
