"""``memory://name``: a broker inside one process, with a real broker's delivery semantics.

For tests and demos, as ``memory://`` is for storage: every ``MemoryBroker`` opened on the
same name in a process shares one set of queues, and each is a consumer "connection" of its
own. Messages are confirmed at once; a delivery stays unsettled with its consumer until it
is acked or released; ``close`` (a consumer whose connection died) puts every delivery it
had not settled back at the head of its queue, marked redelivered with its delivery count,
as RabbitMQ does.
"""

from __future__ import annotations

import itertools
import random
import secrets
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from conveyor.broker.base import Delivery
from conveyor.errors import BrokerURLError

__all__ = ["MemoryBroker", "open_memory_broker"]


@dataclass(slots=True)
class _Message:
    job_id: str
    deliveries: int = 0
    message_id: str = field(default_factory=lambda: secrets.token_hex(8))


@dataclass
class _Hub:
    """The queues every broker of one name shares, under one condition."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    queues: dict[str, deque[_Message]] = field(default_factory=dict)
    dead: deque[str] = field(default_factory=deque)
    tags: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


_HUBS: dict[str, _Hub] = {}
_HUBS_LOCK = threading.Lock()


def open_memory_broker(url: str) -> MemoryBroker:
    """A new consumer connection to the in-process broker ``url`` names
    (``memory://name?delivery_limit=N``: dead-letter a message handed back N times)."""
    rest = url.partition("://")[2]
    name, _, query = rest.partition("?")
    options = dict(parse_qsl(query))
    try:
        limit = int(options.get("delivery_limit", "0"))
    except ValueError:
        raise BrokerURLError(f"broker URL {url!r}: delivery_limit is not a whole number") from None
    with _HUBS_LOCK:
        hub = _HUBS.setdefault(name, _Hub())
    return MemoryBroker(url, hub, limit)


class MemoryBroker:
    """One connection to an in-process broker (see the module docstring)."""

    def __init__(self, url: str, hub: _Hub, delivery_limit: int = 0) -> None:
        self.url = url
        self._hub = hub
        self._limit = delivery_limit
        self._unsettled: dict[int, tuple[str, _Message]] = {}
        self._rng = random.Random()
        self._closed = False

    keyed = False  # one queue, one order: keys would change nothing

    def publish(self, queue: str, job_ids: Sequence[str],
                keys: Sequence[str | None] | None = None, pack: int = 0) -> list[bool]:
        """Append one message per job id (``pack`` is moot); every one is confirmed."""
        with self._hub.cond:
            self._hub.queues.setdefault(queue, deque()).extend(_Message(j) for j in job_ids)
            self._hub.cond.notify_all()
        return [True] * len(job_ids)

    def consume(self, queues: Sequence[tuple[str, int]], limit: int,
                timeout: float) -> list[Delivery]:
        """Up to ``limit`` deliveries, queues in weighted (or, all weights 0, strict) order."""
        if limit <= 0 or self._closed:
            return []
        with self._hub.cond:
            self._hub.cond.wait_for(lambda: self._ready(queues), timeout=timeout)
            out: list[Delivery] = []
            for name in self._order(queues):
                waiting = self._hub.queues.get(name)
                while waiting and len(out) < limit:
                    message = waiting.popleft()
                    message.deliveries += 1
                    tag = next(self._hub.tags)
                    self._unsettled[tag] = (name, message)
                    out.append(Delivery(queue=name, job_id=message.job_id, handle=tag,
                                        redelivered=message.deliveries > 1,
                                        attempts=message.deliveries,
                                        message_id=message.message_id))
            return out

    def _ready(self, queues: Sequence[tuple[str, int]]) -> bool:
        return any(self._hub.queues.get(name) for name, _ in queues)

    def _order(self, queues: Sequence[tuple[str, int]]) -> list[str]:
        if all(weight <= 0 for _, weight in queues):
            return [name for name, _ in queues]
        pool = [(name, weight) for name, weight in queues if weight > 0]
        order: list[str] = []
        while pool:  # a weighted draw without replacement, as the fetcher orders queues
            pick = self._rng.choices(range(len(pool)), [w for _, w in pool])[0]
            order.append(pool.pop(pick)[0])
        return order

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Settle deliveries for good; a delivery of another connection is ignored."""
        with self._hub.cond:
            for delivery in deliveries:
                self._unsettled.pop(_tag(delivery), None)

    def release(self, deliveries: Sequence[Delivery]) -> None:
        """Hand deliveries back to the head of their queue."""
        with self._hub.cond:
            for delivery in deliveries:
                held = self._unsettled.pop(_tag(delivery), None)
                if held is not None:
                    self._hand_back(*held)
            self._hub.cond.notify_all()

    def _hand_back(self, queue: str, message: _Message) -> None:
        if self._limit and message.deliveries >= self._limit:
            self._hub.dead.append(message.job_id)  # past the limit: dead-lettered
        else:
            self._hub.queues.setdefault(queue, deque()).appendleft(message)

    def dead_lettered(self, limit: int = 100) -> list[str]:
        """Job ids handed back more often than ``delivery_limit``, taken off."""
        with self._hub.cond:
            out: list[str] = []
            while self._hub.dead and len(out) < limit:
                out.append(self._hub.dead.popleft())
            return out

    def backlog(self, queue: str) -> int:
        """Messages waiting in ``queue``, not counting unsettled deliveries."""
        with self._hub.cond:
            return len(self._hub.queues.get(queue, ()))

    def close(self) -> None:
        """Hand every unsettled delivery back (as a dropped connection would)."""
        with self._hub.cond:
            self._closed = True
            for name, message in reversed(list(self._unsettled.values())):
                self._hand_back(name, message)
            self._unsettled.clear()
            self._hub.cond.notify_all()


def _tag(delivery: Delivery) -> int:
    return delivery.handle if isinstance(delivery.handle, int) else -1
