"""Periodic schedules as the storage keeps them, and the audit trail of their changes.

Plain data (no I/O, no backend types). A schedule is
*declared* in code (``@app.periodic``: ``origin="code"``, written by every worker at start)
or *added* at run time (the CLI, ``app.schedules.add``, the dashboard: ``origin="runtime"``).
The definition fields are the ones in force; while an operator's edit overrides what the
code declares, ``declared`` keeps the code's definition (JSON), so both can be shown and a
reset can restore it (docs/operations.md, "Schedules at run time").
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["CODE", "COLUMNS", "DEFINITION_FIELDS", "RUNTIME", "WRITTEN", "ScheduleChange",
           "ScheduleInfo", "written"]

CODE = "code"  # declared with @app.periodic: the worker's code owns it
RUNTIME = "runtime"  # added at run time: the store owns it
#: What a schedule enqueues and when: the fields an edit may change.
DEFINITION_FIELDS = ("cron", "tz", "job_name", "queue", "args", "kwargs")


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A periodic schedule as the storage keeps it: what it enqueues (``args`` and ``kwargs``
    as JSON text), where it came from, whether an operator paused it (and when it was last
    resumed), the last tick a worker enqueued, when it was first saved and when its definition
    last changed (epoch seconds)."""

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
    args: str = "[]"
    kwargs: str = "{}"
    origin: str = CODE
    #: The code's definition (JSON of ``definition()``) while an operator's edit overrides
    #: it; None when the definition in force is the code's own (or the schedule has no code).
    declared: str | None = None
    #: When the definition last changed (an edit, a reset, a deploy that declares it anew):
    #: like a resume, no tick from before it is enqueued, so a new cron never catches up.
    changed_at: float | None = None

    def definition(self) -> dict[str, str]:
        """The fields in force that say what is enqueued and when (``DEFINITION_FIELDS``)."""
        return {"cron": self.cron, "tz": self.tz, "job_name": self.job_name,
                "queue": self.queue, "args": self.args, "kwargs": self.kwargs}

    @property
    def edited(self) -> bool:
        """True while an operator's edit overrides the code's definition."""
        return self.declared is not None

    def code_definition(self) -> dict[str, str] | None:
        """What the code declares, when an edit overrides it (else None)."""
        if self.declared is None:
            return None
        raw = json.loads(self.declared)
        return {k: str(raw[k]) for k in DEFINITION_FIELDS if k in raw}

    def arguments(self) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments each tick's job is called with;
        ``ValueError`` when the stored text is not a JSON array and object."""
        args, kwargs = json.loads(self.args), json.loads(self.kwargs)
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError(f"schedule {self.name!r}: args must be a JSON array and kwargs "
                             "a JSON object")
        return args, kwargs

    def floor(self) -> float | None:
        """The time no tick may fall before: the latest of creation, resume and change."""
        times = [t for t in (self.created_at, self.resumed_at, self.changed_at) if t is not None]
        return max(times) if times else None


@dataclass(frozen=True, slots=True)
class ScheduleChange:
    """One change to a schedule, as the audit trail keeps it: when (storage clock), which
    schedule, what was done (``added``, ``changed``, ``paused``, ``resumed``, ``removed``,
    ``reset``, ``declared``), by whom, and a line saying what changed."""

    at: float
    name: str
    action: str
    by: str
    detail: str = ""

    def to_wire(self) -> dict[str, Any]:
        """The JSON form Redis keeps and the views show."""
        return {"at": self.at, "name": self.name, "action": self.action, "by": self.by,
                "detail": self.detail}

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> ScheduleChange:
        """Undo ``to_wire``."""
        return cls(float(raw["at"]), str(raw["name"]), str(raw["action"]), str(raw["by"]),
                   str(raw.get("detail", "")))


#: ``ScheduleInfo``'s fields in order: the columns a SQL store selects (``ScheduleInfo(*row)``).
COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ScheduleInfo))
#: The columns a change writes: all but the last tick, which only ``schedule_ticked`` moves.
WRITTEN: tuple[str, ...] = tuple(c for c in COLUMNS if c != "last_tick")


def written(info: ScheduleInfo) -> tuple[Any, ...]:
    """The values of ``WRITTEN`` for ``info``, in order."""
    return tuple(getattr(info, c) for c in WRITTEN)
