"""Periodic schedules as the storage keeps them. Plain data (no I/O, no backend types)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A periodic schedule as the storage keeps it: what it enqueues, whether an operator
    paused it (and when it was last resumed), the last tick a worker enqueued and when it was
    first saved (epoch seconds)."""

    name: str
    cron: str
    tz: str
    job_name: str
    queue: str
    paused: bool = False
    last_tick: float | None = None
    resumed_at: float | None = None
    #: When the storage first saw the schedule (None for schedules stored before conveyor
    #: recorded it): no tick from before it is ever enqueued, so a new schedule never
    #: "catches up" ticks from before it existed.
    created_at: float | None = None

    def definition(self) -> dict[str, str]:
        """The fields a worker writes (the rest belongs to operators and the ticks)."""
        return {"name": self.name, "cron": self.cron, "tz": self.tz, "job_name": self.job_name,
                "queue": self.queue}
