"""What holds a job back, as its store sees it: ``GateFacts`` (``Inspector.gate_facts``).

A store reads these from the state its own fetch decides by (the same tables, keys and
counters), so the explanation built from them (``conveyor.client.explain``) is not a second
guess. Plain data: no I/O, no backend types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conveyor.core.breaker import BreakerState
from conveyor.core.job import JobRecord

__all__ = ["FAIR_KEYS_SHOWN", "GateFacts", "Holder"]

#: Fair keys named in ``GateFacts.keys_before`` at most (the count says how many in all).
FAIR_KEYS_SHOWN = 10


@dataclass(frozen=True, slots=True)
class Holder:
    """A job that holds what another waits for: a concurrency slot, an order key, a parent."""

    id: str
    state: str
    since: float | None = None  # started (active), due (scheduled, retrying), else None
    cost: int = 1


@dataclass(slots=True)
class GateFacts:
    """One job and what its store's fetch would weigh for it now.

    Only the facts of the job's own state are filled: a pending job's queue, limits and
    place in its lineup; a waiting node's parents; an aggregating member's aggregation.
    """

    job: JobRecord
    now: float
    #: Its queue is paused.
    paused: bool = False
    #: Its priority now (declared, raised by aging) and when aging raises it next.
    band: int = 0
    age_next: float | None = None
    #: The active jobs of its concurrency key, with their costs.
    concurrency: list[Holder] = field(default_factory=list)
    #: The job holding its order key, when that is another job.
    order_holder: Holder | None = None
    #: Start times of its rate key within the window ``(now - rate_period, now]``.
    rate_starts: list[float] = field(default_factory=list)
    #: Pending jobs of its queue at a higher priority.
    higher: int = 0
    #: Fair keys whose turn comes before its key's at its priority (the first
    #: ``FAIR_KEYS_SHOWN``), and how many in all.
    keys_before: list[str] = field(default_factory=list)
    keys_before_count: int = 0
    #: Pending jobs before it in its key at its priority (in arrival order, a queue without
    #: a lineup: before it in the queue).
    earlier: int = 0
    #: Workflow parents not settled yet.
    parents: list[Holder] = field(default_factory=list)
    #: Its aggregation: members waiting, when it is due (flush), its ``max_size``.
    members: int = 0
    flush_at: float | None = None
    #: With a broker: the relay handed it to the broker, which has not delivered it yet.
    published: bool = False
    #: Its breaker, when open or half-open (its jobs wait; one probe runs).
    breaker: BreakerState | None = None
