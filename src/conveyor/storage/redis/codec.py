"""Job records as the Lua scripts store them (one compact JSON object per job), and back.

Short field names keep a pending job small: n name, q queue, p payload, s state, a attempt,
e errors, r recoveries, m max_retries, to timeout, dl deadline, c created_at, sc scheduled at
enqueue, ra run_at, pt pending since, sa started_at, fa finished_at, b batch, w worker, le lease
expiry, tk lease token, lt last acknowledged token, cr cancel requested, res result, msg
message, pg progress [done, total], fl flow control.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from conveyor.job import (
    Ack,
    Event,
    EventKind,
    FlowControl,
    JobRecord,
    JobSpec,
    JobState,
    LeasedJob,
    decode_events,
)

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def record_tail(spec: JobSpec) -> str:
    """The stored record of a new job without its leading ``{`` and the state and creation
    time, which enqueue.lua adds from the storage clock."""
    out = (f'"n":{_dumps(spec.name)},"q":{_dumps(spec.queue)},"p":{_dumps(spec.payload)},'
           f'"m":{int(spec.max_retries)}')
    if spec.timeout is not None:
        out += f',"to":{float(spec.timeout)!r}'
    if spec.deadline is not None:
        out += f',"dl":{float(spec.deadline)!r}'
    if spec.run_at is not None:
        out += f',"ra":{float(spec.run_at)!r}'
    if spec.batch_id:
        out += f',"b":{_dumps(spec.batch_id)}'
    if spec.flow is not None and spec.flow.to_wire():
        out += f',"fl":{_dumps(spec.flow.to_wire())}'
    return out + "}"


def enqueue_args(spec: JobSpec) -> tuple[str, str, str, str, str]:
    """The five ARGV entries enqueue.lua takes per job."""
    flow = spec.flow
    ukey = flow.unique_key if flow is not None and flow.unique_key else ""
    ufor = repr(float(flow.unique_for)) if flow is not None and flow.unique_for else ""
    run_at = repr(float(spec.run_at)) if spec.run_at is not None else ""
    return spec.id, run_at, record_tail(spec), ukey, ufor


def leased(row: Sequence[Any], queue: str) -> LeasedJob:
    """A ``LeasedJob`` from one row of dequeue.lua's reply."""
    return LeasedJob(
        id=row[0], name=row[1], queue=queue, payload=row[2], token=row[3],
        attempt=int(row[4]), errors=int(row[5]), max_retries=int(row[6]),
        timeout=float(row[7]) if row[7] != "" else None,
        batch_id=row[8] or None, recoveries=int(row[9]),
    )


def ndjson(events: Sequence[Event]) -> str:
    """Events as NDJSON lines, the form the event log is stored in."""
    return "".join(e.to_json() + "\n" for e in events)


def progress_arg(progress: tuple[int, int] | None) -> str:
    """``done/total`` or ''."""
    return f"{int(progress[0])}/{int(progress[1])}" if progress else ""


def ack_args(ack: Ack) -> list[str]:
    """The nine ARGV entries ack.lua takes per acknowledgement."""
    return [
        ack.job_id, ack.token, ack.outcome.value, ack.result or "", ack.message or "",
        _dumps(ack.error.to_wire()) if ack.error else "",
        repr(float(ack.retry_in)) if ack.retry_in is not None else "",
        ndjson(ack.events), progress_arg(ack.progress),
    ]


def _opt_float(raw: dict[str, Any], key: str) -> float | None:
    value = raw.get(key)
    return float(value) if value is not None else None


def to_record(job_id: str, text: str, log: str | None, with_events: bool) -> JobRecord:
    """A ``JobRecord`` from a stored record (and its event log when asked for)."""
    raw: dict[str, Any] = json.loads(text)
    pg = raw.get("pg")
    record = JobRecord(
        id=job_id, name=raw["n"], queue=raw["q"], payload=raw["p"], state=JobState(raw["s"]),
        attempt=int(raw.get("a", 0)), errors=int(raw.get("e", 0)),
        recoveries=int(raw.get("r", 0)), max_retries=int(raw.get("m", 25)),
        timeout=_opt_float(raw, "to"), deadline=_opt_float(raw, "dl"),
        created_at=float(raw["c"]), run_at=_opt_float(raw, "ra"),
        started_at=_opt_float(raw, "sa"), finished_at=_opt_float(raw, "fa"),
        batch_id=raw.get("b"), worker=raw.get("w"), lease_expires_at=_opt_float(raw, "le"),
        cancel_requested=bool(raw.get("cr")), result=raw.get("res"), message=raw.get("msg"),
        progress=(int(pg[0]), int(pg[1])) if isinstance(pg, list) and len(pg) == 2 else None,
        flow=FlowControl.from_wire(raw.get("fl")),
    )
    if with_events:
        # The creation event is implied by the record (saves memory on every pending job).
        scheduled = bool(raw.get("sc"))
        first = Event(ts=record.created_at,
                      kind=EventKind.SCHEDULED if scheduled else EventKind.ENQUEUED,
                      state=(JobState.SCHEDULED if scheduled else JobState.PENDING).value)
        record.events = [first, *decode_events(log)]
    return record


def spec_to_json(spec: JobSpec) -> str:
    """A ``JobSpec`` as JSON (batch callbacks are stored this way until they fire)."""
    return _dumps({
        "id": spec.id, "name": spec.name, "queue": spec.queue, "payload": spec.payload,
        "max_retries": spec.max_retries, "timeout": spec.timeout, "deadline": spec.deadline,
        "run_at": spec.run_at, "batch_id": spec.batch_id,
        "flow": spec.flow.to_wire() if spec.flow else None,
    })


def spec_from_json(text: str) -> JobSpec:
    """Inverse of ``spec_to_json``."""
    raw = json.loads(text)
    raw["flow"] = FlowControl.from_wire(raw.get("flow"))
    return JobSpec(**raw)
