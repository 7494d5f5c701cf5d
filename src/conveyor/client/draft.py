"""The job about to be stored: ``EnqueueDraft`` (what client middleware sees and may change)
and the ``JobSpec`` built from it, with its flow control.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from conveyor.client.options import JobOptions, KeyOption
from conveyor.client.payloads import JobData
from conveyor.core.ids import new_id
from conveyor.core.job import FlowControl, JobSpec
from conveyor.core.serializer import encode_payload
from conveyor.core.text import check_name, key_fault, shown
from conveyor.core.versions import stamped
from conveyor.errors import InvalidKeyError

__all__ = ["EnqueueDraft", "build_flow", "build_spec", "run_at_from"]


@dataclass(slots=True)
class EnqueueDraft:
    """A job about to be stored, as client middleware sees it.

    Middleware may change any field (``options`` with ``conveyor.client.options.make_options`` or
    ``dataclasses.replace``); ``meta`` travels with the job and is readable in the worker as
    ``ctx.meta`` (a good place for a request id or tenant).
    """

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: JobOptions
    id: str = field(default_factory=new_id)
    meta: dict[str, Any] = field(default_factory=dict)
    run_at: float | None = None
    batch_id: str | None = None

    @property
    def queue(self) -> str:
        """The queue the job goes to (from ``options``)."""
        return self.options.queue


def run_at_from(
    now: float, delay: float | timedelta | None, at: datetime | float | None
) -> float | None:
    """Epoch seconds of a schedule given as a delay or an aware datetime (or epoch seconds)."""
    if delay is not None and at is not None:
        raise ValueError("give either a delay or a time to run at, not both")
    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        return now + seconds
    if isinstance(at, datetime):
        if at.tzinfo is None or at.tzinfo.utcoffset(at) is None:
            raise ValueError(
                f"enqueue_at needs a timezone-aware datetime, got naive {at.isoformat()}; "
                "use e.g. datetime.now(timezone.utc) + timedelta(hours=1)"
            )
        return at.timestamp()
    return None if at is None else float(at)


def build_spec(draft: EnqueueDraft, now: float, max_payload: int,
               data: JobData | None = None) -> JobSpec:
    """The ``JobSpec`` for a draft; raises ``PayloadError`` for arguments that cannot be stored,
    ``InvalidNameError`` for a name or queue and ``InvalidKeyError`` for a flow-control key no
    backend should store (text.py). ``data`` seals the payload or keeps it by reference
    (``conveyor.client.payloads``)."""
    opts = draft.options
    # Checked here, after client middleware ran, so every backend gives the same answer.
    check_name("job name", draft.name)
    check_name("queue", opts.queue)
    meta = stamped(draft.meta, opts.version)
    if data is not None and data.active:
        payload = data.encode_payload(draft.id, draft.name, draft.args, draft.kwargs,
                                      meta, max_payload, movable=opts.fold is not None)
    else:
        payload = encode_payload(draft.args, draft.kwargs, meta, max_payload)
    run_at = draft.run_at
    if run_at is None and opts.fold is not None:  # a debounce or throttle window
        run_at = now + opts.fold.seconds
    start = run_at if run_at is not None else now
    return JobSpec(
        id=draft.id,
        name=draft.name,
        queue=opts.queue,
        payload=payload,
        max_retries=opts.max_retries,
        timeout=opts.timeout,
        # expires_in counts from when the job is due, so a scheduled job is not born expired.
        deadline=None if opts.expires_in is None else start + opts.expires_in,
        run_at=run_at,
        batch_id=draft.batch_id,
        flow=build_flow(draft.name, opts, draft.args, draft.kwargs),
    )


def build_flow(
    name: str, opts: JobOptions, args: list[Any], kwargs: Mapping[str, Any]
) -> FlowControl | None:
    """The job's ``FlowControl``: key callables are called with the job's arguments.

    ``unique_for`` alone locks on a hash of name + args + kwargs; ``concurrency=N`` or
    ``rate_limit=N`` alone limit the whole job name. Every key is checked by the key rule
    (``InvalidKeyError``).
    """
    if not opts.has_flow:
        return None
    unique_key = _key(opts.unique_key, args, kwargs)
    if opts.unique_for and unique_key is None:
        unique_key = f"{name}:{_args_hash(name, args, kwargs)}"
    flow = FlowControl(
        unique_key=unique_key,
        unique_for=opts.unique_for,
        concurrency_key=(
            _key(opts.concurrency_key, args, kwargs) or (name if opts.concurrency else None)
        ),
        concurrency_limit=opts.concurrency,
        rate_key=_key(opts.rate_key, args, kwargs) or (name if opts.rate_limit else None),
        rate_limit=opts.rate_limit,
        rate_period=opts.rate_period,
        order_key=_key(opts.order_key, args, kwargs),
        fold_key=(_key(opts.fold.key, args, kwargs) or name) if opts.fold else None,
        fold=opts.fold.mode if opts.fold else "",
        **_group(name, opts, args, kwargs),
        priority=opts.priority,
        aging=float(opts.aging or 0.0),
        fair_key=_key(opts.fair_by, args, kwargs),
        cost=opts.cost,
        **_breaker(name, opts, args, kwargs),
    )
    check_keys(name, flow)
    return flow


def check_keys(name: str, flow: FlowControl) -> None:
    """Raise ``InvalidKeyError`` (one line naming the kind of key and the job) when a key of
    ``flow`` breaks the key rule (``text.key_fault``)."""
    for kind, key in flow.named_keys():
        fault = key_fault(key)
        if fault is not None:
            raise InvalidKeyError(f"{kind} {shown(key)} of job {shown(name)} {fault} "
                                  "(docs/flow-control.md, \"Keys\")")


def _group(name: str, opts: JobOptions, args: list[Any],
           kwargs: Mapping[str, Any]) -> dict[str, Any]:
    agg = opts.aggregate
    if agg is None:
        return {}
    key = _key(agg.key, args, kwargs) or name
    return {"group_key": key, "grace": float(agg.grace), "max_delay": float(agg.max_delay),
            "max_size": agg.max_size}


def _breaker(name: str, opts: JobOptions, args: list[Any],
             kwargs: Mapping[str, Any]) -> dict[str, Any]:
    brk = opts.breaker
    if brk is None:
        return {}
    return {"breaker_key": _key(brk.key, args, kwargs) or name,
            "breaker_open_after": brk.open_after, "breaker_within": float(brk.within),
            "breaker_cool_down": float(brk.cool_down)}


def _key(option: KeyOption, args: list[Any], kwargs: Mapping[str, Any]) -> str | None:
    if option is None or isinstance(option, str):
        return option
    key = option(*args, **kwargs)
    if not isinstance(key, str) or not key:
        raise TypeError(f"flow-control key function {option!r} returned {key!r}, not a string")
    return key


def _args_hash(name: str, args: list[Any], kwargs: Mapping[str, Any]) -> str:
    text = json.dumps([name, args, kwargs], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
