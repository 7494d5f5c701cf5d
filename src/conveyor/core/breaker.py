"""Circuit breakers (docs/operations.md, "Breakers"): when the jobs of one key keep failing —
a downstream service is down — the store stops handing them out for a while instead of
spending every job's attempts on it.

``Breaker`` is what ``@app.job(breaker=...)`` takes; ``BreakerState`` is what a store reads
back (``Inspector.breakers``). The states are the classic ones (pybreaker, resilience4j):
``closed`` (jobs run; counted errors are logged within a sliding window), ``open`` (jobs of the
key wait ``pending`` until the cool-down ends), ``half_open`` (one probe job runs; its outcome
closes or reopens the breaker). The rules live in ``storage/breakers.py``; every store applies
them in the same step that leases or acknowledges a job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "Breaker", "BreakerState"]

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


@dataclass(frozen=True, slots=True)
class Breaker:
    """Open the breaker of ``key`` after ``open_after`` counted errors within ``within``
    seconds; keep it open ``cool_down`` seconds, then let one probe job through.

    ``key``: a string, a callable given the job's arguments (as ``fair_by``), or None: the
    job's name (one breaker per job type). Jobs that share a key should share one
    ``Breaker``: the store applies the settings the acknowledged job carries.
    """

    key: str | Callable[..., str] | None = None
    open_after: int = 5
    within: float = 60.0
    cool_down: float = 30.0

    def __post_init__(self) -> None:
        if not (self.key is None or isinstance(self.key, str) or callable(self.key)):
            raise ValueError(f"Breaker key must be a string, a callable or None, "
                             f"not {self.key!r}")
        if isinstance(self.key, str) and not self.key:
            raise ValueError("Breaker key must not be empty")
        if not (isinstance(self.open_after, int) and not isinstance(self.open_after, bool)
                and self.open_after >= 1):
            raise ValueError(f"Breaker open_after must be a whole number >= 1, "
                             f"not {self.open_after!r}")
        for name in ("within", "cool_down"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and not isinstance(value, bool)
                    and math.isfinite(value) and value > 0):
                raise ValueError(f"Breaker {name} must be a finite number of seconds > 0, "
                                 f"not {value!r}")


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One breaker as its store holds it now.

    ``failures``: counted errors within the window; ``opened_at``/``probe_at``: when it last
    opened and when a probe may start (None while closed); ``probe_id``: the job leased as
    the probe while half-open; ``reason``: one line, why it opened; ``trips``: times opened.
    ``queue``: the queue it counts in where a store keeps one breaker per queue (Redis: a
    script touches one queue's slot), None where a breaker spans queues.
    """

    key: str
    state: str
    failures: int = 0
    opened_at: float | None = None
    probe_at: float | None = None
    probe_id: str | None = None
    reason: str | None = None
    trips: int = 0
    queue: str | None = None

    @property
    def holding(self) -> bool:
        """Open or half-open: the key's jobs do not start (but a probe)."""
        return self.state != CLOSED
