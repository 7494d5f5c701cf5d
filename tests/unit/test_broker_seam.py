"""The broker seam's protocol (docs/design.md §7): its shape, before any broker implements it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from conveyor.broker import Broker, Delivery


class ListBroker:
    """The smallest thing with the Broker shape: proves the protocol is implementable as written."""

    url = "list://"

    def __init__(self) -> None:
        self.ready: list[Delivery] = []

    def publish(self, queue: str, job_ids: Sequence[str]) -> list[bool]:
        self.ready += [Delivery(queue, job_id, handle=len(self.ready)) for job_id in job_ids]
        return [True] * len(job_ids)

    def consume(self, queues: Sequence[tuple[str, int]], limit: int,
                timeout: float) -> list[Delivery]:
        names = {name for name, _ in queues}
        taken = [d for d in self.ready if d.queue in names][:limit]
        self.ready = [d for d in self.ready if d not in taken]
        return taken

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        pass

    def release(self, deliveries: Sequence[Delivery]) -> None:
        self.ready += [dataclasses.replace(d, redelivered=True) for d in deliveries]

    def close(self) -> None:
        pass


def test_a_broker_of_that_shape_is_a_broker() -> None:
    broker = ListBroker()
    assert isinstance(broker, Broker)
    assert broker.publish("default", ["a", "b"]) == [True, True]
    first = broker.consume([("default", 1)], limit=1, timeout=0)
    assert [d.job_id for d in first] == ["a"]
    broker.release(first)
    again = broker.consume([("default", 1)], limit=5, timeout=0)
    assert [(d.job_id, d.redelivered) for d in again] == [("b", False), ("a", True)]


def test_a_delivery_is_plain_frozen_data() -> None:
    delivery = Delivery("default", "job-1", handle=("channel", 7))
    assert (delivery.redelivered, delivery.attempts) == (False, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delivery.job_id = "other"  # type: ignore[misc]
