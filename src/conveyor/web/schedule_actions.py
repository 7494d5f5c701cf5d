"""The dashboard's schedule changes (the Periodic page's forms), each recorded in the audit
trail with who made it: ``dashboard <client address>``. Reached, like every other action,
only by a CSRF-checked POST to ``/action`` (``web/actions.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from conveyor.client.periodic import check_definition
from conveyor.core.text import check_name
from conveyor.errors import ConveyorError, ScheduleNotFound
from conveyor.storage.base import Inspector
from conveyor.storage.schedule_records import ScheduleInfo

Form = dict[str, list[str]]
#: The form fields of a definition, and the stored field each one sets.
FIELDS = (("cron", "cron"), ("tz", "tz"), ("job", "job_name"), ("queue", "queue"),
          ("args", "args"), ("kwargs", "kwargs"))


def _value(form: Form, name: str) -> str:
    return form.get(name, [""])[0].strip()


def _name(form: Form) -> str:
    name = _value(form, "schedule")
    if not name:
        raise ConveyorError("the form is missing 'schedule'")
    return name


def _json(text: str, field: str, kind: type) -> Any:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ConveyorError(f"{field} is not JSON: {text[:80]}") from None
    if not isinstance(value, kind):
        raise ConveyorError(f"{field} must be a JSON {'array' if kind is list else 'object'}")
    return value


def _fields(form: Form, *, every: bool) -> dict[str, str]:
    """The definition the form gives (``every``: all of it, blanks meaning the defaults; or
    only the fields it changes), checked as every surface checks it."""
    defaults = {"tz": "UTC", "queue": "default", "args": "[]", "kwargs": "{}"}
    raw: dict[str, Any] = {}
    for field, key in FIELDS:
        text = _value(form, field) or (defaults.get(field, "") if every else "")
        if not text:
            if every:
                raise ConveyorError(f"a schedule needs its {field}")
            continue
        raw[key] = (_json(text, field, list) if field == "args" else
                    _json(text, field, dict) if field == "kwargs" else text)
    try:
        return check_definition(raw)
    except ValueError as exc:
        raise ConveyorError(str(exc)) from None


def _add(insp: Inspector, form: Form, by: str) -> str:
    name = _name(form)
    try:
        check_name("schedule name", name)
    except ValueError as exc:
        raise ConveyorError(str(exc)) from None
    f = _fields(form, every=True)
    insp.add_schedule(ScheduleInfo(name, f["cron"], f["tz"], f["job_name"], f["queue"],
                                   paused=bool(_value(form, "paused")), args=f["args"],
                                   kwargs=f["kwargs"]), by)
    return f"added schedule {name}"


def _change(insp: Inspector, form: Form, by: str) -> str:
    name = _name(form)
    info = insp.change_schedule(name, _fields(form, every=False), by)
    return f"changed schedule {name}" + (" (stands over the code's definition until reset)"
                                         if info.edited else "")


def _remove(insp: Inspector, form: Form, by: str) -> str:
    name = _name(form)
    removed = insp.remove_schedule(name, by)
    if removed is None:
        raise ScheduleNotFound(f"no periodic schedule named {name!r}")
    return f"removed schedule {name}" + ("; the code declares it, so the next worker to start "
                                         "adds it again" if removed.origin == "code" else "")


def _reset(insp: Inspector, form: Form, by: str) -> str:
    name = _name(form)
    try:
        insp.reset_schedule(name, by)
    except ValueError as exc:
        raise ConveyorError(str(exc)) from None
    return f"reset schedule {name} to the code's definition"


def _pause(pause: bool) -> Callable[[Inspector, Form, str], str]:
    def run(insp: Inspector, form: Form, by: str) -> str:
        name = _name(form)
        change = insp.pause_schedule if pause else insp.resume_schedule
        if not change(name, by):
            raise ScheduleNotFound(f"no periodic schedule named {name!r}")
        return f"{'paused' if pause else 'resumed'} schedule {name}"

    return run


OPERATIONS: dict[str, Callable[[Inspector, Form, str], str]] = {
    "add-schedule": _add, "change-schedule": _change, "remove-schedule": _remove,
    "reset-schedule": _reset, "pause-schedule": _pause(True), "resume-schedule": _pause(False),
}
