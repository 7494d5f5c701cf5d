"""A job's flow-control settings (``JobSpec.flow``): unique, concurrency, rate, order and
debounce/throttle keys."""

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
}
#: The keys a store consults when a job starts (dequeue, a broker's start), in the order it
#: checks them: a stored one that breaks the rule ends its job dead there (docs/flow-control.md).
GATE_KEYS = ("concurrency_key", "order_key", "rate_key")


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

    def named_keys(self) -> list[tuple[str, str]]:
        """``(kind, key)`` of every key set, kinds as ``KEY_KINDS`` names them."""
        return [(kind, key) for field, kind in KEY_KINDS.items()
                if (key := getattr(self, field)) is not None and key != ""]

    def to_wire(self) -> dict[str, Any]:
        """Dict with only the settings in use."""
        values = {k: getattr(self, k) for k in self.__slots__}
        return {k: v for k, v in values.items() if v not in (None, 0, 0.0, "")}

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
