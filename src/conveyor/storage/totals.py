"""Outcome counters the storage keeps: all time per (queue, job name) for metrics
(``JobTotals``), and per queue and minute for the last day (``MinuteTotals``,
``Inspector.history``), with the minute arithmetic every backend shares. Plain data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobTotals:
    """All-time outcome counters for one (queue, job name), for metrics."""

    queue: str
    name: str
    processed: int
    failed: int
    dead: int
    retried: int


# Per-minute outcome counters are kept this long: one day of minutes, the overview's history.
HISTORY_MINUTES = 1440


def minute_of(ts: float) -> int:
    """The minute a storage timestamp falls in, counted from the epoch (UTC)."""
    return int(ts // 60)


def today_start(now: float) -> int:
    """The first minute of ``now``'s UTC day: "today" counts are the history's minutes from
    there (a day of minutes is always kept, so today's are all there)."""
    return int(now // 86400) * 1440


def history_start(now: float, since: int = 0) -> int:
    """The first minute ``Inspector.history`` reports at ``now``: ``since``, but no earlier
    than the oldest minute of the last ``HISTORY_MINUTES`` (the current one included)."""
    return max(since, minute_of(now) - HISTORY_MINUTES + 1)


@dataclass(frozen=True, slots=True)
class MinuteTotals:
    """Outcomes of one queue in one minute (``Inspector.history``)."""

    queue: str
    minute: int  # minutes since the epoch: the minute starts at ``minute * 60``
    processed: int  # succeeded
    failed: int  # failed (a business rule said no)
    dead: int  # died (retries exhausted, killed, recovered too often, unreadable)
    retried: int  # errors that will run again
