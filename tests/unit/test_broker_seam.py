"""The broker seam's protocol (docs/internals/broker.md) and the in-process ``memory://`` broker."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter

import pytest

from conveyor.broker import Broker, Delivery, open_broker


def _pair() -> tuple[Broker, Broker]:
    """Two connections to one fresh in-process broker."""
    url = f"memory://{uuid.uuid4().hex}"
    return open_broker(url), open_broker(url)


def test_memory_is_a_broker_and_confirms_every_publish() -> None:
    a, _ = _pair()
    assert isinstance(a, Broker)
    assert a.publish("default", ["j1", "j2"]) == [True, True]
    assert a.backlog("default") == 2 and a.backlog("other") == 0


def test_deliveries_never_exceed_the_limit_and_strict_order_takes_the_first_queue_first() -> None:
    a, _ = _pair()
    a.publish("low", ["l1"])
    a.publish("high", ["h1", "h2"])
    got = a.consume([("high", 0), ("low", 0)], limit=2, timeout=0)
    assert [d.job_id for d in got] == ["h1", "h2"]
    assert [d.job_id for d in a.consume([("high", 0), ("low", 0)], 5, 0)] == ["l1"]


def test_weighted_order_prefers_the_heavier_queue_but_serves_both() -> None:
    a, _ = _pair()
    firsts: Counter[str] = Counter()
    for _ in range(400):
        a.publish("heavy", ["h"])
        a.publish("light", ["l"])
        got = a.consume([("heavy", 3), ("light", 1)], limit=1, timeout=0)
        firsts[got[0].queue] += 1
        a.ack(got)
        a.ack(a.consume([("heavy", 3), ("light", 1)], limit=1, timeout=0))
    assert firsts["heavy"] > firsts["light"] > 0


def test_release_and_a_closed_connection_redeliver_with_a_count() -> None:
    a, b = _pair()
    a.publish("default", ["j1", "j2"])
    first = a.consume([("default", 0)], 1, 0)
    a.release(first)
    again = a.consume([("default", 0)], 2, 0)
    assert [(d.job_id, d.redelivered, d.attempts) for d in again] == [
        ("j1", True, 2), ("j2", False, 1)]
    a.close()  # a connection that dies: everything it held goes to the next consumer
    taken = b.consume([("default", 0)], 5, 0)
    assert sorted((d.job_id, d.redelivered) for d in taken) == [("j1", True), ("j2", True)]
    b.ack(taken)
    assert b.consume([("default", 0)], 5, 0) == [] and b.backlog("default") == 0


def test_an_ack_from_another_connection_settles_nothing() -> None:
    a, b = _pair()
    a.publish("default", ["j1"])
    held = a.consume([("default", 0)], 1, 0)
    b.ack(held)
    a.close()
    assert [d.job_id for d in b.consume([("default", 0)], 1, 0)] == ["j1"]


def test_a_delivery_is_plain_frozen_data() -> None:
    delivery = Delivery("default", "job-1", handle=("channel", 7))
    assert (delivery.redelivered, delivery.attempts) == (False, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delivery.job_id = "other"  # type: ignore[misc]


def test_memory_dead_letters_a_message_handed_back_past_its_delivery_limit() -> None:
    url = f"memory://{uuid.uuid4().hex}?delivery_limit=2"
    publisher = open_broker(url)
    publisher.publish("default", ["poison", "fine"])
    for _ in range(2):
        consumer = open_broker(url)
        assert [d.job_id for d in consumer.consume([("default", 0)], 1, 0)] == ["poison"]
        consumer.close()  # dies holding it
    assert publisher.dead_lettered() == ["poison"] and publisher.dead_lettered() == []
    assert [d.job_id for d in publisher.consume([("default", 0)], 5, 0)] == ["fine"]
