"""Jobs as the Lua scripts store them, and back.

Each job is two entries in its queue's hashes (see ``lua/_lib.lua``): ``jobs[id]``, static
JSON the client writes once (n name, q queue, p payload, m max_retries, to timeout,
dl deadline, ra run_at, b batch, fl flow), and ``state[id]``, the mutable fields joined by TAB
(order in ``STATE_FIELDS``), a newline, then the NDJSON event log.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
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

STATE_FIELDS = ("s", "c", "a", "e", "r", "tk", "w", "le", "sa", "fa", "pt", "ra", "lt", "lo",
                "cr", "pg", "n", "b", "dl", "sc", "fl")
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_loads = json.JSONDecoder().decode


def check_text(what: str, value: str) -> None:
    """Names, queues, batch and worker ids end up in TAB-separated state lines."""
    if "\t" in value or "\n" in value:
        raise ValueError(f"{what} {value!r} must not contain a tab or a newline")


@lru_cache(maxsize=1024)
def _json_name(value: str) -> str:
    # Job names and queues repeat across a bulk enqueue; encode each once.
    return _dumps(value)


def static_json(spec: JobSpec) -> str:
    """The immutable part of a job, written once at enqueue."""
    out = (f'{{"n":{_json_name(spec.name)},"q":{_json_name(spec.queue)},'
           f'"p":{_dumps(spec.payload)},"m":{int(spec.max_retries)}')
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


def enqueue_args(spec: JobSpec) -> tuple[str, ...]:
    """The nine ARGV entries enqueue.lua takes per job."""
    _check_name(spec.name)
    batch = spec.batch_id or ""
    if batch:
        check_text("batch id", batch)
    flow = spec.flow
    if flow is None:
        ukey = ufor = limited = ""
    else:
        ukey = flow.unique_key or ""
        ufor = repr(float(flow.unique_for)) if flow.unique_for else ""
        limited = "1" if flow.concurrency_key or flow.order_key or flow.rate_key else ""
    return (spec.id, "" if spec.run_at is None else repr(float(spec.run_at)),
            static_json(spec), spec.name, batch,
            "" if spec.deadline is None else repr(float(spec.deadline)), ukey, ufor, limited)


@lru_cache(maxsize=1024)
def _check_name(name: str) -> None:
    check_text("job name", name)


def leased(row: Sequence[Any], queue: str) -> LeasedJob:
    """A ``LeasedJob`` from one row of dequeue.lua's reply."""
    static = _loads(row[1])
    timeout = static.get("to")
    return LeasedJob(
        id=row[0], name=static["n"], queue=queue, payload=static["p"], token=row[2],
        attempt=int(row[3]), errors=int(row[4] or 0), max_retries=int(static["m"]),
        timeout=float(timeout) if timeout is not None else None,
        batch_id=static.get("b"), recoveries=int(row[5] or 0),
    )


def ndjson(events: Sequence[Event]) -> str:
    """Events as NDJSON lines, the form the event log is stored in."""
    return "".join(e.to_json() + "\n" for e in events)


def progress_arg(progress: tuple[int, int] | None) -> str:
    """``done/total`` or ''."""
    return f"{int(progress[0])}/{int(progress[1])}" if progress else ""


def ack_args(ack: Ack) -> list[str]:
    """The nine ARGV entries ack.lua takes per acknowledgement."""
    error = ack.error
    return [
        ack.job_id, ack.token, ack.outcome.value, ack.result or "",
        ack.message or (error.message if error is not None else "") or "",
        _dumps(error.to_wire()) if error is not None else "",
        repr(float(ack.retry_in)) if ack.retry_in is not None else "",
        ndjson(ack.events) if ack.events else "", progress_arg(ack.progress),
    ]


def _opt(value: str) -> float | None:
    return float(value) if value else None


def to_record(job_id: str, static_text: str, state_text: str, result: str | None,
              message: str | None, with_events: bool) -> JobRecord:
    """A ``JobRecord`` from a job's stored entries (and its event log when asked for)."""
    static: dict[str, Any] = _loads(static_text)
    head, _, log = state_text.partition("\n")
    f = dict(zip(STATE_FIELDS, head.split("\t"), strict=False))
    done, _, total = f.get("pg", "").partition("/")
    state = JobState(f["s"])
    record = JobRecord(
        id=job_id, name=static["n"], queue=static["q"], payload=static["p"], state=state,
        attempt=int(f["a"] or 0), errors=int(f["e"] or 0), recoveries=int(f["r"] or 0),
        max_retries=int(static.get("m", 25)), timeout=static.get("to"),
        deadline=static.get("dl"), created_at=float(f["c"]),
        run_at=_opt(f["ra"]) if f["ra"] else static.get("ra"),
        started_at=_opt(f["sa"]), finished_at=_opt(f["fa"]), batch_id=static.get("b"),
        worker=f["w"] or None, lease_expires_at=_opt(f["le"]) if state is JobState.ACTIVE
        else None, cancel_requested=bool(f["cr"]), result=result, message=message,
        progress=(int(done), int(total)) if total else None,
        flow=FlowControl.from_wire(static.get("fl")),
    )
    if with_events:
        # The creation event is implied by the state line (saves memory on every job).
        scheduled = bool(f.get("sc"))
        first = Event(ts=record.created_at,
                      kind=EventKind.SCHEDULED if scheduled else EventKind.ENQUEUED,
                      state=(JobState.SCHEDULED if scheduled else JobState.PENDING).value)
        record.events = [first, *decode_events(log)]
    return record


def pending_since(state_text: str) -> float | None:
    """When a pending job became pending, from its state line."""
    f = dict(zip(STATE_FIELDS, state_text.partition("\n")[0].split("\t"), strict=False))
    return float(f.get("pt") or f.get("c") or 0.0) or None


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
