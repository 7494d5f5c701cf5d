"""A job's stored entries read back as a ``JobRecord`` (what inspection and the operators'
reads show), and the reads of a state line the scripts' callers make. The layout of the
entries is ``codec.py``'s (``lua/_record.lua``)."""

from __future__ import annotations

import json
from typing import Any

from conveyor.core.job import Event, EventKind, FlowControl, JobRecord, JobState, decode_events
from conveyor.storage.redis.codec import (
    STATE_FIELDS,
    Unreadable,
    _int,
    _opt_text,
    _utf8,
    _why,
    static_of,
)

_loads = json.JSONDecoder().decode


def _opt(value: str) -> float | None:
    return float(value) if value else None


def to_record(job_id: str, static_text: str | None, state_text: str | None,
              result: str | None, message: str | None, with_events: bool) -> JobRecord:
    """A ``JobRecord`` from a job's stored entries (and its event log when asked for).

    Never raises on stored data: a damaged entry gives a record with ``unreadable`` set and
    every field that could be read (the rest defaulted), so operators can see and delete it.
    """
    try:
        return _record(job_id, static_of(static_text), state_text, result, message,
                       with_events)
    except (Unreadable, ValueError, TypeError, KeyError) as exc:
        return _partial(job_id, static_text, state_text, result, message, with_events,
                        _why(exc))


def _fields(state_text: str | None) -> tuple[dict[str, str], str]:
    if not state_text:
        raise Unreadable("state entry missing")
    head, _, log = state_text.partition("\n")
    parts = _utf8("state entry", head).split("\t")
    if len(parts) < len(STATE_FIELDS):
        raise Unreadable(f"state entry truncated ({len(parts)} of {len(STATE_FIELDS)} fields)")
    return dict(zip(STATE_FIELDS, parts, strict=False)), log


def _record(job_id: str, static: dict[str, Any], state_text: str | None, result: str | None,
            message: str | None, with_events: bool) -> JobRecord:
    f, log = _fields(state_text)
    done, _, total = f["progress"].partition("/")
    try:
        state = JobState(f["state"])
    except ValueError:
        raise Unreadable(f"state entry names no known state: {f['state'][:40]!r}") from None
    if result is not None and not _is_json(_utf8("result", result)):
        raise Unreadable("result is not JSON (truncated?)")  # as_dict() shows it decoded
    record = JobRecord(
        id=job_id, name=static["n"], queue=static["q"], payload=static["p"], state=state,
        attempt=int(f["attempts"] or 0), errors=int(f["errors"] or 0),
        recoveries=int(f["recoveries"] or 0), max_retries=int(static.get("m", 25)),
        timeout=static.get("to"), deadline=static.get("dl"),
        created_at=float(f["created_at"]),
        run_at=_opt(f["run_at"]) if f["run_at"] else static.get("ra"),
        started_at=_opt(f["started_at"]), finished_at=_opt(f["finished_at"]),
        batch_id=static.get("b"), worker=f["worker"] or None,
        lease_expires_at=_opt(f["lease_expires"]) if state is JobState.ACTIVE else None,
        cancel_requested=bool(f["cancel_requested"]), result=result, message=message,
        progress=(int(done), int(total)) if total else None,
        flow=FlowControl.from_wire(static.get("fl")),
    )
    if with_events:
        record.events = [_first_event(record.created_at, f), *decode_events(log)]
    return record


def _first_event(created_at: float, f: dict[str, str]) -> Event:
    # The creation event is implied by the state line (saves memory on every job).
    how = f.get("created_scheduled")  # '1' scheduled, 'a' a member in its group
    scheduled = how == "1"
    state = (JobState.SCHEDULED if scheduled else
             JobState.AGGREGATING if how == "a" else JobState.PENDING)
    return Event(ts=created_at, kind=EventKind.SCHEDULED if scheduled else EventKind.ENQUEUED,
                 state=state.value)


def _partial(job_id: str, static_text: str | None, state_text: str | None,
             result: str | None, message: str | None, with_events: bool,
             why: str) -> JobRecord:
    """What can be read of a damaged job: each field on its own, defaults for the rest."""
    try:
        static = _loads(static_text or "{}")
    except (ValueError, RecursionError):
        static = {}
    if not isinstance(static, dict):
        static = {}
    head, _, log = (state_text or "").partition("\n")
    f = dict(zip(STATE_FIELDS, head.split("\t"), strict=False))
    state = next((s for s in JobState if s.value == f.get("state")), JobState.DEAD)
    record = JobRecord(
        id=job_id, name=_text(static.get("n")), queue=_text(static.get("q")),
        payload=_text(static.get("p")), state=state, attempt=_int(f.get("attempts")),
        errors=_int(f.get("errors")), recoveries=_int(f.get("recoveries")),
        created_at=_float(f.get("created_at")) or 0.0,
        started_at=_float(f.get("started_at")), finished_at=_float(f.get("finished_at")),
        batch_id=_opt_text(static.get("b")),
        worker=f.get("worker") or None, message=message, unreadable=why,
        result=result if result is not None and _is_json(result) else None,
    )
    if with_events:
        record.events = decode_events(log)
    return record


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _is_json(text: str) -> bool:
    try:
        _loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def pending_since(state_text: str) -> float | None:
    """When a pending job became pending, from its state line."""
    f = dict(zip(STATE_FIELDS, state_text.partition("\n")[0].split("\t"), strict=False))
    return _float(f.get("pending_since")) or _float(f.get("created_at")) or None
