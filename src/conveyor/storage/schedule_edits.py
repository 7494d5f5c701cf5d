"""What each change does to a stored schedule, written once for every backend.

A backend's schedules part gives these rules one atomic step over one schedule
(``ScheduleSteps.apply`` over a ``ScheduleTxn``: memory's lock, a SQLite or PostgreSQL
transaction, a compare-and-set script on Redis) and the rules do the rest (``ScheduleEdits``,
a part each storage makes over it): the new record and the audit entry are written in that
same step, so the trail never misses a change and never shows one that did not happen.

**The latest deliberate change wins.** A schedule declared in code (``@app.periodic``) is
written by every worker at start (``save_schedules``). An operator may change it at run time;
the edit then stands, across restarts, until an operator resets it or a deploy changes what
the code declares for it: a worker writing the same declaration as before changes nothing
(``ScheduleInfo.declared`` keeps the code's definition while edited, so both can be shown and
a reset can restore it), while a new declaration is put in force and drops the edit, as Oban
Pro's DynamicCron updates a persisted entry when its crontab entry changes. A schedule added
at run time that the code comes to declare is taken over by the code the same way. Pausing
is never part of a definition: a pause stands until a resume, whoever declared the schedule.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

from conveyor.errors import ScheduleExists, ScheduleNotFound
from conveyor.storage.schedule_records import (
    CODE,
    DEFINITION_FIELDS,
    RUNTIME,
    ScheduleChange,
    ScheduleInfo,
)

__all__ = ["CHANGES_KEPT", "ScheduleEdits", "ScheduleSteps", "ScheduleTxn", "describe",
           "difference", "newest"]

T = TypeVar("T")

#: Audit entries each store keeps (the newest); older ones are dropped as new ones come.
CHANGES_KEPT = 1000


class ScheduleTxn(Protocol):
    """One atomic step over the stored schedule of one name."""

    def read(self) -> ScheduleInfo | None:
        """The schedule as stored now, or None."""
        ...

    def write(self, info: ScheduleInfo) -> None:
        """Store ``info`` (creating or replacing it); the last tick stays as stored."""
        ...

    def delete(self) -> None:
        """Remove the schedule (its last tick too)."""
        ...

    def note(self, change: ScheduleChange) -> None:
        """Append ``change`` to the audit trail (keeping the newest ``CHANGES_KEPT``)."""
        ...


def describe(definition: Mapping[str, str]) -> str:
    """One line naming a definition's fields, for the audit trail."""
    return " ".join(f"{k}={definition[k]!s}" if k in ("args", "kwargs")
                    else f"{k}={definition[k]!r}" for k in DEFINITION_FIELDS)


def difference(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """The fields that differ, ``cron '* * * * *' -> '0 * * * *'``, or '' when none do."""
    return ", ".join(f"{k} {old.get(k)!r} -> {new[k]!r}" for k in DEFINITION_FIELDS
                     if old.get(k) != new[k])


def _with(info: ScheduleInfo, definition: Mapping[str, str], *, declared: str | None,
          changed_at: float | None) -> ScheduleInfo:
    d = definition
    return dataclasses.replace(info, cron=d["cron"], tz=d["tz"], job_name=d["job_name"],
                               queue=d["queue"], args=d["args"], kwargs=d["kwargs"],
                               declared=declared, changed_at=changed_at)


def declare(txn: ScheduleTxn, *, code: ScheduleInfo, now: float, by: str) -> None:
    """A worker writes a schedule its code declares (see the module doc). A first save
    records the schedule. A later one changes nothing while the code declares what it declared
    before, so an operator's edit stands; when the code declares something new (a deploy), the
    new declaration is the latest change and is put in force, dropping any edit."""
    old, want = txn.read(), code.definition()
    if old is None:
        txn.write(dataclasses.replace(code, origin=CODE, declared=None, paused=False,
                                      last_tick=None, resumed_at=None, created_at=now,
                                      changed_at=None))
        txn.note(ScheduleChange(now, code.name, "declared", by, describe(want)))
        return
    current = old.definition()
    # What the code declared last (None: never, the schedule was added at run time).
    before = None if old.origin == RUNTIME else old.code_definition() or current
    if want == before:
        return  # the code is unchanged: the definition in force (maybe an edit) stands
    overridden = ("" if current == before else
                  " (replacing the definition added at run time)" if before is None else
                  " (the edit made at run time is dropped)")
    if current == want:
        txn.write(dataclasses.replace(old, origin=CODE, declared=None))
        txn.note(ScheduleChange(now, code.name, "declared", by,
                                "the code now declares the definition in force"))
        return
    txn.write(dataclasses.replace(_with(old, want, declared=None, changed_at=now),
                                  origin=CODE))
    txn.note(ScheduleChange(now, code.name, "declared", by,
                            difference(current, want) + overridden))


class ScheduleSteps(Protocol):
    """What ``ScheduleEdits`` needs of a backend's schedules part."""

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        ...

    def apply(self, name: str, rule: Callable[[ScheduleTxn], T]) -> T:
        """Run ``rule`` over a ``ScheduleTxn`` of schedule ``name`` as one atomic step (again,
        on a store that may find the schedule changed under it, as Redis's compare-and-set
        does) and return what it returned."""
        ...


class ScheduleEdits:
    """The schedule members of ``Storage`` and ``Inspector`` written once: a part each
    backend's storage makes over its clock (``now``) and its schedules part (``steps``), and
    delegates those members to."""

    def __init__(self, now: Callable[[], float], steps: ScheduleSteps) -> None:
        self._now = now
        self._steps = steps

    def save_schedules(self, schedules: Sequence[ScheduleInfo], by: str = "") -> None:
        """Write the schedules a worker's code declares (``declare``)."""
        now = self._now()
        for info in schedules:
            self._steps.apply(info.name, functools.partial(declare, code=info, now=now, by=by))

    def schedule_pauses(self) -> dict[str, float | None]:
        """Paused schedules (None) and resumed ones (when)."""
        return {s.name: None if s.paused else s.resumed_at for s in self._steps.schedules()
                if s.paused or s.resumed_at is not None}

    def add_schedule(self, info: ScheduleInfo, by: str) -> ScheduleInfo:
        """Store a schedule added at run time; ``ScheduleExists`` if the name is taken."""
        now = self._now()

        def rule(txn: ScheduleTxn) -> ScheduleInfo:
            if txn.read() is not None:
                raise ScheduleExists(f"a periodic schedule named {info.name!r} exists already; "
                                     "change it, or remove it first")
            added = dataclasses.replace(info, origin=RUNTIME, declared=None, last_tick=None,
                                        resumed_at=None, created_at=now, changed_at=None)
            txn.write(added)
            txn.note(ScheduleChange(now, info.name, "added", by, describe(added.definition())
                                    + (" (paused)" if added.paused else "")))
            return added

        return self._steps.apply(info.name, rule)

    def change_schedule(self, name: str, changes: Mapping[str, str], by: str) -> ScheduleInfo:
        """Change fields of a schedule's definition (an edit of a declared one stands until
        ``reset_schedule``); ``ScheduleNotFound`` for an unknown name."""
        unknown = set(changes) - set(DEFINITION_FIELDS)
        if unknown:
            raise ValueError(f"not a field of a schedule: {', '.join(sorted(unknown))}")
        now = self._now()

        def rule(txn: ScheduleTxn) -> ScheduleInfo:
            old = _found(txn, name)
            before = old.definition()
            after = {**before, **changes}
            if after == before:
                return old
            declared = old.declared
            if old.origin == CODE:
                code = old.code_definition() or before
                declared = None if after == code else json.dumps(code)
            new = _with(old, after, declared=declared, changed_at=now)
            txn.write(new)
            txn.note(ScheduleChange(now, name, "changed", by, difference(before, after)))
            return new

        return self._steps.apply(name, rule)

    def reset_schedule(self, name: str, by: str) -> ScheduleInfo:
        """Drop an operator's edit of a declared schedule: the code's definition is in force
        again. ``ScheduleNotFound`` for an unknown name, ``ValueError`` when not edited."""
        now = self._now()

        def rule(txn: ScheduleTxn) -> ScheduleInfo:
            old = _found(txn, name)
            code = old.code_definition()
            if code is None:
                raise ValueError(f"schedule {name!r} has no edit to reset: "
                                 + ("it is the code's definition" if old.origin == CODE
                                    else "it was added at run time (change or remove it)"))
            new = _with(old, code, declared=None, changed_at=now)
            txn.write(new)
            txn.note(ScheduleChange(now, name, "reset", by, difference(old.definition(), code)))
            return new

        return self._steps.apply(name, rule)

    def remove_schedule(self, name: str, by: str) -> ScheduleInfo | None:
        """Remove a schedule; returns what it was (None for an unknown name). One the code
        still declares comes back at the next worker start."""
        now = self._now()

        def rule(txn: ScheduleTxn) -> ScheduleInfo | None:
            old = txn.read()
            if old is None:
                return None
            txn.delete()
            txn.note(ScheduleChange(now, name, "removed", by, describe(old.definition())))
            return old

        return self._steps.apply(name, rule)

    def pause_schedule(self, name: str, by: str = "") -> bool:
        """Pause a schedule; False if unknown. Ticks that fall while paused are skipped."""
        return self._set_paused(name, True, by)

    def resume_schedule(self, name: str, by: str = "") -> bool:
        """Resume a schedule, noting when (ticks of the paused period are never caught up);
        False if unknown. Resuming one that is not paused changes nothing."""
        return self._set_paused(name, False, by)

    def _set_paused(self, name: str, paused: bool, by: str) -> bool:
        now = self._now()

        def rule(txn: ScheduleTxn) -> bool:
            old = txn.read()
            if old is None:
                return False
            if old.paused != paused:  # resuming a running schedule must not move resumed_at
                txn.write(dataclasses.replace(
                    old, paused=paused, resumed_at=old.resumed_at if paused else now))
                txn.note(ScheduleChange(now, name, "paused" if paused else "resumed", by))
            return True

        return self._steps.apply(name, rule)


def _found(txn: ScheduleTxn, name: str) -> ScheduleInfo:
    old = txn.read()
    if old is None:
        raise ScheduleNotFound(f"no periodic schedule named {name!r}")
    return old


def newest(changes: Iterator[ScheduleChange], name: str | None, limit: int
           ) -> list[ScheduleChange]:
    """The first ``limit`` of ``changes`` (newest first) of schedule ``name`` (None: all)."""
    out: list[ScheduleChange] = []
    for change in changes:
        if name is None or change.name == name:
            out.append(change)
            if len(out) >= limit:
                break
    return out
