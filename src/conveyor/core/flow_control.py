"""A job's flow-control settings (``JobSpec.flow``): unique, concurrency, rate, order and
debounce/throttle keys, and how it is scheduled within its queue: priority, fair key, cost
(docs/scheduling.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Every key a job's flow control may carry, field -> the name a message gives it. One rule
#: holds for all of them (``text.key_fault``); a new kind of key (fairness) is one more entry.
KEY_KINDS = {
    "unique_key": "unique key",
    "concurrency_key": "concurrency key",
    "rate_key": "rate key",
    "order_key": "order key",
    "fold_key": "debounce/throttle key",
    "group_key": "aggregation key",
    "fair_key": "fair key",
    "breaker_key": "breaker key",
}
#: The keys a store consults when a job starts (dequeue, a broker's start), in the order it
#: checks them: a stored one that breaks the rule ends its job dead there (docs/flow-control.md).
GATE_KEYS = ("concurrency_key", "order_key", "rate_key", "breaker_key")
#: The range of ``priority`` (Django's tasks API's): higher runs first within a queue.
PRIORITY_MIN, PRIORITY_MAX = -100, 100


@dataclass(frozen=True, slots=True)
class FlowControl:
    """Optional flow-control settings of a job, enforced atomically by the storage."""

    unique_key: str | None = None
    unique_for: float | None = None
    concurrency_key: str | None = None
    concurrency_limit: int = 0
    rate_key: str | None = None
    rate_limit: int = 0
    rate_period: float = 0.0
    order_key: str | None = None
    #: Debounce or throttle (``Debounce.mode`` / ``Throttle.mode``): a call with ``fold_key``
    #: while a job of that key is still scheduled joins that job instead of making one.
    fold_key: str | None = None
    fold: str = ""
    #: Aggregation (``Aggregate``): the job waits ``aggregating`` in the aggregation of
    #: (queue, name, ``group_key``) until the aggregation is due, then runs with it through
    #: the job's aggregator (docs/aggregation.md). Seconds, seconds, members.
    group_key: str | None = None
    grace: float = 0.0
    max_delay: float = 0.0
    max_size: int = 0
    #: Scheduling within the queue (docs/scheduling.md): ``priority`` -100..100, higher first;
    #: ``aging`` seconds after which a waiting job's priority rises by one (0: never);
    #: ``fair_key``: the queue is shared round robin between keys; ``cost``: the slots of a
    #: worker's ``-c`` the job takes while it runs (and of its concurrency key's limit).
    priority: int = 0
    aging: float = 0.0
    fair_key: str | None = None
    cost: int = 1
    #: A circuit breaker (``Breaker``, docs/operations.md "Breakers"): after
    #: ``breaker_open_after`` counted errors of ``breaker_key`` within ``breaker_within``
    #: seconds, the key's jobs wait ``breaker_cool_down`` seconds, then one probe runs.
    breaker_key: str | None = None
    breaker_open_after: int = 0
    breaker_within: float = 0.0
    breaker_cool_down: float = 0.0

    def named_keys(self) -> list[tuple[str, str]]:
        """``(kind, key)`` of every key set, kinds as ``KEY_KINDS`` names them."""
        return [(kind, key) for field, kind in KEY_KINDS.items()
                if (key := getattr(self, field)) is not None and key != ""]

    def to_wire(self) -> dict[str, Any]:
        """Dict with only the settings in use."""
        values = {k: getattr(self, k) for k in self.__slots__}
        return {k: v for k, v in values.items()
                if v not in (None, 0, 0.0, "") and not (k == "cost" and v == 1)}

    @property
    def in_lineup(self) -> bool:
        """The job starts by its queue's lineup walk (a priority, aging, a fair key or a cost
        above one: docs/scheduling.md), not by the stores' arrival-order fast path."""
        return bool(self.priority or self.aging or self.fair_key or self.cost != 1)

    @property
    def limited(self) -> bool:
        """The job waits on a concurrency, order or rate limit."""
        return bool(self.concurrency_key or self.order_key or self.rate_key)

    @property
    def fold_moves(self) -> bool:
        """A folded call moves the run time (debounce), or leaves it (throttle)."""
        return self.fold.startswith("debounce")

    @property
    def fold_replaces(self) -> bool:
        """A folded call's arguments replace the waiting job's (keep the last)."""
        return self.fold in ("debounce", "throttle-last")

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any] | None) -> FlowControl | None:
        """Inverse of ``to_wire``; ``None`` when nothing is set."""
        if not raw:
            return None
        return cls(**{k: raw[k] for k in cls.__slots__ if k in raw})
