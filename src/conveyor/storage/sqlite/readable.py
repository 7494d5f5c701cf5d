"""Job rows as the Inspector reads them: every row readable, whatever is stored in it.

SQLite hands back a TEXT column only if it holds valid UTF-8; one damaged row (written by
another tool, or a disk fault) would make a whole listing raise. The Inspector therefore
selects text columns as BLOBs and decodes each value itself: a value that is not UTF-8 is
shown with U+FFFD in place of the bad bytes, and the record says so in ``unreadable``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from conveyor.core.job import JobRecord, JobState, decode_events
from conveyor.storage.job_heads import JobHead
from conveyor.storage.sqlite import jobs

_NAMES = [c.strip() for c in jobs.JOB_COLUMNS.split(",")]
_TEXT = frozenset({"id", "name", "queue", "payload", "state", "batch_id", "worker", "result",
                   "message", "progress", "flow"})
#: ``jobs.JOB_COLUMNS`` with every text column read as bytes.
COLUMNS = ", ".join(f"CAST({c} AS BLOB)" if c in _TEXT else c for c in _NAMES)
EVENTS = "CAST(events AS BLOB)"
#: What ``job_heads`` selects: identity and state, and the payload and the message cut to a
#: number of characters (the two parameters), all as bytes.
HEAD_COLUMNS = ("CAST(id AS BLOB), CAST(name AS BLOB), CAST(queue AS BLOB), "
                "CAST(state AS BLOB), created_at, CAST(substr(payload, 1, ?) AS BLOB), "
                "CAST(substr(message, 1, ?) AS BLOB)")
# What a number column that holds something else reads as (NOT NULL columns need a value).
_DEFAULTS = {"attempt": 0, "errors": 0, "recoveries": 0, "max_retries": 0, "created_at": 0.0,
             "cancel_requested": 0}


def _value(value: Any, column: str, damage: list[str]) -> Any:
    if column not in _TEXT:
        if value is None or isinstance(value, (int, float)):
            return value
        damage.append(f"{column} is not a number")
        return _DEFAULTS.get(column)
    return _text(value, column, damage)


def _text(value: Any, column: str, damage: list[str]) -> Any:
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        damage.append(f"{column} is not valid UTF-8")
        return value.decode(errors="replace")


def record(row: Sequence[Any], events: Any = None) -> JobRecord:
    """A ``JobRecord`` from a row selected with ``COLUMNS`` (plus ``EVENTS`` if given);
    never raises on stored data: a damaged row gives a record with ``unreadable`` set."""
    damage: list[str] = []
    values = [_value(v, c, damage) for v, c in zip(row, _NAMES, strict=True)]
    log = _text(events, "events", damage) if events is not None else None
    try:
        out = jobs.record(values, log)
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        damage.append(f"a field cannot be read: {exc}")
        out = _partial(values, log)
    if out.result is not None and not _is_json(out.result):
        damage.append("result is not JSON")
        out.result = None
    if damage:
        out.unreadable = "; ".join(damage)
    return out


def head(row: Sequence[Any]) -> JobHead:
    """A ``JobHead`` from a row selected with ``HEAD_COLUMNS``; never raises on stored data."""
    damage: list[str] = []
    job_id, name, queue, state, payload, message = (
        _text(v, "", damage) or "" for v in (*row[:4], *row[5:]))
    created = row[4] if isinstance(row[4], (int, float)) else 0.0
    known = next((s for s in JobState if s.value == state), None)
    return JobHead(id=job_id, name=name, queue=queue, state=known, created_at=float(created),
                   payload=payload, message=message)


def _partial(values: list[Any], log: str | None) -> JobRecord:
    """What can be read of a damaged row: text as text, numbers as numbers, else defaults."""
    f = dict(zip(_NAMES, values, strict=True))

    def text(name: str) -> str:
        value = f.get(name)
        return value if isinstance(value, str) else ""

    def number(name: str) -> float | None:
        value = f.get(name)
        return float(value) if isinstance(value, (int, float)) else None

    state = next((s for s in JobState if s.value == f.get("state")), JobState.DEAD)
    return JobRecord(
        id=text("id"), name=text("name"), queue=text("queue"), payload=text("payload"),
        state=state, attempt=int(number("attempt") or 0), errors=int(number("errors") or 0),
        created_at=number("created_at") or 0.0, started_at=number("started_at"),
        finished_at=number("finished_at"), batch_id=text("batch_id") or None,
        worker=text("worker") or None, result=text("result") or None,
        message=text("message") or None,
        events=decode_events(log) if log is not None else None,
    )


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True
