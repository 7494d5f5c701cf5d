"""``app.schedules``: the periodic schedules of an app, in code and in the store.

Iterating it gives the schedules the code declares (``@app.periodic``), which every worker
writes to the store when it starts. Its methods work on the store, at run time, for every
worker at once: ``add`` a schedule, ``change`` one (an edit of a declared schedule stands
over the code's definition until ``reset`` or a new declaration), ``pause``, ``resume``,
``remove``, read them (``stored``, ``get``) and the audit trail of every change
(``changes``). Each change is recorded with who made it (``by``, by default this user and
host).

The CLI (``conveyor periodic``) and the dashboard's Periodic page make the same changes
through the same checks (``periodic.check_definition``); docs/operations.md, "Schedules at
run time", says what each one does to the ticks.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

from conveyor.client.options import JobOptions
from conveyor.client.periodic import Schedule, check_definition
from conveyor.core.text import check_name
from conveyor.errors import ScheduleNotFound
from conveyor.storage import Backend
from conveyor.storage.schedule_records import ScheduleChange, ScheduleInfo

__all__ = ["Schedules", "who"]


def who(surface: str) -> str:
    """Who makes a change from this process, for the audit trail: ``cli ada@web1``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): the uid says enough
        user = f"uid {os.getuid()}"
    return f"{surface} {user}@{socket.gethostname()}"


class Schedules(Sequence[Schedule]):
    """The app's schedules: a sequence of those its code declares, and the store's, which
    the methods change at run time (``ScheduleNotFound`` for a name nobody stored)."""

    def __init__(self, storage: Callable[[], Backend],
                 jobs: Callable[[str], JobOptions | None]) -> None:
        self._storage = storage
        self._jobs = jobs
        self.declared: list[Schedule] = []

    # -- declared in code ---------------------------------------------------------------------
    def declare(self, schedule: Schedule) -> None:
        """Add a schedule the code declares (``@app.periodic`` calls this)."""
        if any(s.name == schedule.name for s in self.declared):
            raise ValueError(f"a periodic schedule named {schedule.name!r} already exists; "
                             "pass name= to tell them apart")
        self.declared.append(schedule)

    @overload
    def __getitem__(self, index: int) -> Schedule: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Schedule]: ...

    def __getitem__(self, index: int | slice) -> Schedule | Sequence[Schedule]:
        return self.declared[index]

    def __len__(self) -> int:
        return len(self.declared)

    def __iter__(self) -> Iterator[Schedule]:
        return iter(self.declared)

    # -- in the store ---------------------------------------------------------------------------
    def stored(self) -> list[ScheduleInfo]:
        """Every stored schedule (declared and added), by name."""
        return self._storage().schedules()

    def get(self, name: str) -> ScheduleInfo:
        """The stored schedule ``name``."""
        for info in self.stored():
            if info.name == name:
                return info
        raise ScheduleNotFound(f"no periodic schedule named {name!r}")

    def add(self, name: str, cron: str, job: Any, *, args: Sequence[Any] = (),
            kwargs: Mapping[str, Any] | None = None, queue: str | None = None,
            tz: str = "UTC", paused: bool = False, by: str | None = None) -> ScheduleInfo:
        """Add a schedule at run time: ``job`` (a job function or a job's name) is enqueued
        on ``cron`` in ``tz`` with ``args``/``kwargs``, in ``queue`` (default: the job's).
        Workers whose app defines the job enqueue its ticks, with that job's options, from
        their next look on. ``ScheduleExists`` if the name is taken, ``ValueError`` for a
        bad field. ``paused=True`` stores it paused."""
        job_name = job if isinstance(job, str) else getattr(job, "name", None)
        if not isinstance(job_name, str):
            raise TypeError(f"job must be a job function or a job's name, not {job!r}")
        opts = self._jobs(job_name)
        fields = check_definition({
            "cron": cron, "tz": tz, "job_name": job_name,
            "queue": queue or (opts.queue if opts is not None else "default"),
            "args": args, "kwargs": {} if kwargs is None else kwargs})
        info = ScheduleInfo(_named(name), fields["cron"], fields["tz"], fields["job_name"],
                            fields["queue"], paused=paused, args=fields["args"],
                            kwargs=fields["kwargs"])
        return self._storage().add_schedule(info, by or who("app"))

    def change(self, name: str, *, by: str | None = None, **fields: Any) -> ScheduleInfo:
        """Change fields of a stored schedule's definition (``cron``, ``tz``, ``job`` or
        ``job_name``, ``queue``, ``args``, ``kwargs``); returns it as stored. An edit of a
        declared schedule stands until ``reset``, or until a deploy declares something new."""
        if "job" in fields:
            job = fields.pop("job")
            fields["job_name"] = job if isinstance(job, str) else getattr(job, "name", job)
        return self._storage().change_schedule(name, check_definition(fields),
                                               by or who("app"))

    def reset(self, name: str, by: str | None = None) -> ScheduleInfo:
        """Put the code's definition of a declared schedule back in force."""
        return self._storage().reset_schedule(name, by or who("app"))

    def pause(self, name: str, by: str | None = None) -> None:
        """Stop every worker enqueueing the schedule's ticks (they are skipped, not caught
        up on resume)."""
        if not self._storage().pause_schedule(name, by or who("app")):
            raise ScheduleNotFound(f"no periodic schedule named {name!r}")

    def resume(self, name: str, by: str | None = None) -> None:
        """Let workers enqueue a paused schedule's ticks again, from the next one on."""
        if not self._storage().resume_schedule(name, by or who("app")):
            raise ScheduleNotFound(f"no periodic schedule named {name!r}")

    def remove(self, name: str, by: str | None = None) -> ScheduleInfo:
        """Remove a stored schedule; returns what it was. One the code still declares is
        written again by the next worker that starts (pause it to stop it for good)."""
        removed = self._storage().remove_schedule(name, by or who("app"))
        if removed is None:
            raise ScheduleNotFound(f"no periodic schedule named {name!r}")
        return removed

    def changes(self, name: str | None = None, limit: int = 50) -> list[ScheduleChange]:
        """The audit trail, newest first: every change of ``name`` (None: of all)."""
        return self._storage().schedule_changes(name, limit)


def _named(name: str) -> str:
    check_name("schedule name", name)
    return name
