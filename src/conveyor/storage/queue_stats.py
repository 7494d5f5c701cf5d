"""One queue as the ``Inspector`` reports it: sizes per state, latency, pause, outcomes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue as the ``Inspector`` reports it."""

    name: str
    pending: int
    scheduled: int
    active: int
    retrying: int
    latency: float  # age in seconds of the oldest pending job; 0 when empty
    paused: bool
    processed: int  # succeeded, all time
    failed: int  # failed + dead outcomes, all time
    dead: int  # currently in the dead set
    processed_today: int = 0
    failed_today: int = 0
    waiting: int = 0  # workflow nodes waiting for their parents
    aggregating: int = 0  # members waiting for their aggregation group's run
