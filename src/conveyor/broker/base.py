"""The broker boundary: what a message broker (RabbitMQ, later Kafka) must do for the worker.

The store decides, the broker delivers. A message carries a job id and nothing the store does
not already hold; a delivery only tells a worker *which* job to try to start, and the store's
lease (fenced as today) decides whether it may. docs/internals/broker.md has the whole design.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a consumer, with the broker's own handle for settling it.

    ``handle`` is opaque outside the broker (a RabbitMQ delivery tag with its channel, a Kafka
    partition and offset). ``redelivered`` is the broker's hint that an earlier consumer got
    the message and did not settle it; ``attempts`` counts deliveries where the broker keeps
    such a count (a quorum queue's ``x-delivery-count``), else 0. ``message_id`` names the
    message: every publish gives its message a new one, and a redelivery keeps it, so the store
    can tell the message that started a job from an older one of the same job
    (``conveyor.storage.outbox.Arrival``); None where a message came without one.
    """

    queue: str
    job_id: str
    handle: object
    redelivered: bool = False
    attempts: int = 0
    message_id: str | None = None


@runtime_checkable
class Broker(Protocol):
    """Publish job ids to queues and hand them out to consumers, each settled exactly once."""

    url: str
    #: Whether ``publish`` uses the jobs' order keys (Kafka's message key keeps one key's
    #: messages in one partition, in order); the relay reads them from the store only then.
    keyed: bool

    def publish(self, queue: str, job_ids: Sequence[str],
                keys: Sequence[str | None] | None = None, pack: int = 0) -> list[bool]:
        """Publish the job ids and wait for the broker to confirm them; True for each id a
        confirmed message carries. The relay hands the unconfirmed back to the store
        (``Outbox.publish_failed``), which has them published again. ``keys``: each job's
        order key (None: none), given when the broker is ``keyed``. ``pack``: at most how
        many ids one message may carry (0: the broker's own bound), for a broker that packs
        several into one; a broker of one message per job ignores it."""
        ...

    def consume(self, queues: Sequence[tuple[str, int]], limit: int,
                timeout: float) -> list[Delivery]:
        """Up to ``limit`` deliveries from ``queues`` (name, weight; weight 0 = strict order as
        today), waiting at most ``timeout`` seconds for the first. ``limit`` is the worker's
        free slots: the broker never holds more unsettled deliveries for it (prefetch)."""
        ...

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Settle deliveries for good: the job they started has been acknowledged in the
        store, or the store said there was nothing to run (finished, a duplicate, parked)."""
        ...

    def release(self, deliveries: Sequence[Delivery]) -> None:
        """Hand deliveries back unsettled so the broker delivers them again (a worker shutting
        down before it started them). A broker counting deliveries may dead-letter a message
        past its limit; the store then records the job ``dead`` with the reason."""
        ...

    def backlog(self, queue: str) -> int:
        """Messages waiting in ``queue`` not yet delivered: the relay keeps this below its
        window so the backlog waits in the store, where flow control and pausing see it."""
        ...

    def dead_lettered(self, limit: int = 100) -> list[str]:
        """Job ids of messages the broker gave up on (delivered more often than its delivery
        limit without being settled), taken off its dead-letter queue: the relay records
        those jobs ``dead`` in the store (``Outbox.bury``)."""
        ...

    def close(self) -> None:
        """Hand back every unsettled delivery and close the connection."""
        ...
