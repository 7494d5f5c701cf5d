"""Jobs as the Lua scripts store them, and back.

Each job is two entries in its queue's hashes (see ``lua/_record.lua``): ``jobs[id]``, static
JSON the client writes once (n name, q queue, p payload, m max_retries, to timeout,
dl deadline, ra run_at, b batch, fl flow), and ``state[id]``, the mutable fields joined by TAB
(order in ``STATE_FIELDS``), a newline, then the NDJSON event log. ``records.py`` reads the
two back as a ``JobRecord``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from json.encoder import encode_basestring_ascii as _escape
from typing import Any

from conveyor.core.job import (
    Ack,
    Event,
    FlowControl,
    JobSpec,
    LeasedJob,
)
from conveyor.core.text import key_fault
from conveyor.storage.batch_records import spec_from_wire, spec_to_wire
from conveyor.storage.blocks import JobBlock

# The fields of a state line, in order: the one definition. lua/_fields.lua spells each as
# F_<NAME> = its position, and scripts.py refuses to load the scripts when the two disagree.
STATE_FIELDS = (
    "state", "created_at", "attempts", "errors", "recoveries", "token", "worker",
    "lease_expires", "started_at", "finished_at", "pending_since", "run_at", "last_token",
    "last_outcome", "cancel_requested", "progress", "name", "batch", "deadline",
    "created_scheduled", "flow_controlled",
)
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
    return (_static_head(spec.name, spec.queue) + _dumps(spec.payload)
            + _static_tail(spec.max_retries, spec.timeout, spec.deadline, spec.run_at,
                           spec.batch_id, spec.flow))


def block_statics(block: JobBlock, start: int = 0, end: int | None = None) -> list[str]:
    """``static_json`` of each of the jobs ``start:end`` of a block without flow control:
    the shared fields are encoded once, each payload is escaped into its place.

    Payloads of printable ASCII (what the client's encoder writes) are escaped all at once:
    for them JSON's escaping is only a backslash before each backslash and quote, and the
    newlines that join them (no such payload holds one) cut the result apart again.
    """
    payloads = block.payloads[start:end]
    if not payloads:
        return []
    head = _static_head(block.name, block.queue) + '"'
    tail = '"' + _static_tail(block.max_retries, block.timeout, block.deadline, block.run_at,
                              block.batch_id, None)
    text = "\n".join(payloads)
    if text.isascii() and "".join(payloads).isprintable():
        body = text.replace("\\", "\\\\").replace('"', '\\"')
        return (head + body.replace("\n", f"{tail}\n{head}") + tail).split("\n")
    return [f"{head[:-1]}{_escape(payload)}{tail[1:]}" for payload in payloads]


def _static_head(name: str, queue: str) -> str:
    return f'{{"n":{_json_name(name)},"q":{_json_name(queue)},"p":'


def _static_tail(max_retries: int, timeout: float | None, deadline: float | None,
                 run_at: float | None, batch_id: str | None, flow: FlowControl | None) -> str:
    out = f',"m":{int(max_retries)}'
    if timeout is not None:
        out += f',"to":{float(timeout)!r}'
    if deadline is not None:
        out += f',"dl":{float(deadline)!r}'
    if run_at is not None:
        out += f',"ra":{float(run_at)!r}'
    if batch_id:
        out += f',"b":{_dumps(batch_id)}'
    if flow is not None and flow.to_wire():
        out += f',"fl":{_dumps(flow.to_wire())}'
    return out + "}"


def block_args(block: JobBlock) -> list[str]:
    """ARGV 4-7 of enqueue.lua's "block" layout (the fields a block's jobs share); the
    ids and ``block_statics`` follow."""
    _check_name(block.name)
    if block.batch_id:
        check_text("batch id", block.batch_id)
    return [block.name, block.batch_id or "", _opt_float(block.deadline), _opt_float(block.run_at)]


def joinable(ids: Sequence[str]) -> bool:
    """Whether ids can travel joined by newlines (none empty, none holding one)."""
    return all(ids) and "\n" not in "".join(ids)


def distinct(ids: Sequence[str]) -> bool:
    """Whether no id comes twice (enqueue.lua's "block" layout counts on it)."""
    return len(set(ids)) == len(ids)


def _opt_float(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def enqueue_args(spec: JobSpec) -> tuple[str, ...]:
    """The eleven ARGV entries enqueue.lua takes per job (its "each" layout)."""
    _check_name(spec.name)
    batch = spec.batch_id or ""
    if batch:
        check_text("batch id", batch)
    flow = spec.flow
    if flow is None:
        ukey = ufor = limited = fkey = fold = ""
    else:
        ukey = flow.unique_key or ""
        ufor = repr(float(flow.unique_for)) if flow.unique_for else ""
        limited = "1" if flow.limited or flow.breaker_key else ""  # lua/_admit.lua gates
        if flow.in_lineup:  # "l": waits in its queue's lineup while pending (lua/_lineup.lua)
            limited = "l"
        # a member: its group settings, read by lua/_groups.lua (a key that breaks the key
        # rule makes no member: it runs as a lead of its own, as on every store)
        if flow.group_key and key_fault(flow.group_key) is None:
            limited = (f"g{flow.group_key}\x1f{flow.grace!r}\x1f{flow.max_delay!r}"
                       f"\x1f{flow.max_size:d}")
        fkey, fold = flow.fold_key or "", flow.fold
    # run_at "w": a workflow node waiting for its parents (stored "waiting", in no queue)
    run_at = "w" if spec.waits else _opt_float(spec.run_at)
    return (spec.id, run_at, static_json(spec), spec.name, batch,
            _opt_float(spec.deadline), ukey, ufor, limited, fkey, fold)


def plain(spec: JobSpec) -> bool:
    """Whether ``enqueue_one.lua`` stores the job: no flow control, batch or workflow."""
    return spec.flow is None and spec.node is None and not spec.batch_id


def enqueue_one_args(spec: JobSpec) -> tuple[str, str, str, str, str]:
    """ARGV 2-6 of enqueue_one.lua for a ``plain`` job: id, run_at, static, name, deadline."""
    _check_name(spec.name)
    return spec.id, _opt_float(spec.run_at), static_json(spec), spec.name, _opt_float(spec.deadline)


@lru_cache(maxsize=1024)
def _check_name(name: str) -> None:
    check_text("job name", name)


def order_key(static: object) -> str | None:
    """The order key in a job's static record (None without one, or for a record that cannot
    be read: the broker then keys the message by the job's id)."""
    try:
        decoded = json.loads(static) if isinstance(static, (str, bytes)) else None
        key = decoded["fl"]["order_key"] if isinstance(decoded, dict) else None
    except (ValueError, KeyError, TypeError):
        return None
    return key if isinstance(key, str) else None


class Unreadable(ValueError):
    """A stored entry that cannot be decoded; the message says why, for operators."""


def _utf8(what: str, text: str) -> str:
    # The connection decodes bytes that are not UTF-8 to lone surrogates (surrogateescape).
    try:
        if not text.isascii():  # O(1) in CPython; most records are ASCII JSON
            text.encode()
    except UnicodeEncodeError:
        raise Unreadable(f"{what} is not valid UTF-8") from None
    return text


def static_of(text: str | None) -> dict[str, Any]:
    """A job's static JSON as a dict with its required fields checked; ``Unreadable`` when
    it is missing, not UTF-8, not JSON, or lacks a field."""
    if not text:
        raise Unreadable("job record missing")
    try:
        static = _loads(_utf8("job record", text))
    except RecursionError:
        raise Unreadable("job record nested too deeply") from None
    except ValueError as exc:
        if isinstance(exc, Unreadable):
            raise
        raise Unreadable(f"job record is not JSON (truncated?): {exc}") from None
    if not isinstance(static, dict):
        raise Unreadable("job record is not a JSON object")
    for key, kind in (("n", str), ("q", str), ("p", str)):
        if not isinstance(static.get(key), kind):
            raise Unreadable(f"job record lacks its {_FIELD_NAMES[key]} field")
    return static


_FIELD_NAMES = {"n": "name", "q": "queue", "p": "payload"}


def leased(row: Sequence[Any], queue: str) -> LeasedJob:
    """A ``LeasedJob`` from one row of dequeue.lua's reply. A record that cannot be decoded
    is still returned, with ``unreadable`` saying why, so that only it ends dead."""
    counts = [_int(row[3]), _int(row[4]), _int(row[5])]
    try:
        if len(row) > 6 and row[6]:
            raise Unreadable(str(row[6]))
        static = static_of(row[1])
        timeout = static.get("to")
        flow = static.get("fl")  # a plain job has none: no call beyond this look-up
        cost = flow.get("cost") if flow.__class__ is dict else None
        return LeasedJob(
            id=row[0], name=static["n"], queue=queue, payload=static["p"], token=row[2],
            attempt=counts[0], errors=counts[1], max_retries=int(static.get("m", 25)),
            timeout=float(timeout) if timeout is not None else None,
            batch_id=_opt_text(static.get("b")), recoveries=counts[2],
            cost=max(1, int(cost)) if cost else 1,
        )
    except (Unreadable, ValueError, TypeError) as exc:
        return LeasedJob(id=row[0], name="", queue=queue, payload="", token=row[2],
                         attempt=counts[0], errors=counts[1], max_retries=0, timeout=None,
                         batch_id=None, recoveries=counts[2], unreadable=_why(exc))


def _why(exc: Exception) -> str:
    return str(exc) if isinstance(exc, Unreadable) else f"job record has a bad field: {exc}"


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _opt_text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def ndjson(events: Sequence[Event]) -> str:
    """Events as NDJSON lines, the form the event log is stored in."""
    return "".join(e.to_json() + "\n" for e in events)


def progress_arg(progress: tuple[int, int] | None) -> str:
    """``done/total`` or ''."""
    return f"{int(progress[0])}/{int(progress[1])}" if progress else ""


def ack_args(ack: Ack) -> list[str]:
    """The ten ARGV entries ack.lua takes per acknowledgement."""
    error = ack.error
    return [
        ack.job_id, ack.token, ack.outcome.value, ack.result or "",
        ack.message or (error.message if error is not None else "") or "",
        _dumps(error.to_wire()) if error is not None else "",
        repr(float(ack.retry_in)) if ack.retry_in is not None else "",
        ndjson(ack.events) if ack.events else "", progress_arg(ack.progress),
        "" if ack.ran else "0",  # "0": it never ran (no breaker counts it)
    ]


def spec_to_json(spec: JobSpec) -> str:
    """A ``JobSpec`` as JSON (batch callbacks are stored this way until they fire)."""
    return _dumps(spec_to_wire(spec))


def spec_from_json(text: str) -> JobSpec:
    """Inverse of ``spec_to_json``."""
    return spec_from_wire(json.loads(text))
