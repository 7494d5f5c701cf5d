"""The enqueue side: the draft client middleware sees, the ``JobSpec`` built from it, and
``JobRef``, the handle to a stored job.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from conveyor.errors import JobFailed, JobNotFound, ResultTimeout
from conveyor.ids import new_id
from conveyor.job import EnqueueResult, FlowControl, JobRecord, JobSpec, JobState
from conveyor.registry import JobOptions, KeyOption
from conveyor.serializer import encode_payload, loads
from conveyor.text import check_name

__all__ = [
    "CHUNK_SIZE", "EnqueueDraft", "JobLookup", "JobRef", "SpecBuffer", "build_spec", "run_at_from",
]

CHUNK_SIZE = 1000
"""Specs per storage call in bulk enqueues: bounds memory and stays far below Lua's unpack limit."""

_POLL_FIRST = 0.005
_POLL_MAX = 0.2


@dataclass(slots=True)
class EnqueueDraft:
    """A job about to be stored, as client middleware sees it.

    Middleware may change any field (``options`` with ``registry.make_options`` or
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


def build_spec(draft: EnqueueDraft, now: float, max_payload: int) -> JobSpec:
    """The ``JobSpec`` for a draft; raises ``PayloadError`` for arguments that cannot be stored
    and ``InvalidNameError`` for a name or queue no backend should store (text.py)."""
    opts = draft.options
    # Checked here, after client middleware ran, so every backend gives the same answer.
    check_name("job name", draft.name)
    check_name("queue", opts.queue)
    payload = encode_payload(draft.args, draft.kwargs, draft.meta, max_payload)
    start = draft.run_at if draft.run_at is not None else now
    return JobSpec(
        id=draft.id,
        name=draft.name,
        queue=opts.queue,
        payload=payload,
        max_retries=opts.max_retries,
        timeout=opts.timeout,
        # expires_in counts from when the job is due, so a scheduled job is not born expired.
        deadline=None if opts.expires_in is None else start + opts.expires_in,
        run_at=draft.run_at,
        batch_id=draft.batch_id,
        flow=build_flow(draft.name, opts, draft.args, draft.kwargs),
    )


def build_flow(
    name: str, opts: JobOptions, args: list[Any], kwargs: Mapping[str, Any]
) -> FlowControl | None:
    """The job's ``FlowControl``: key callables are called with the job's arguments.

    ``unique_for`` alone locks on a hash of name + args + kwargs; ``concurrency=N`` or
    ``rate_limit=N`` alone limit the whole job name.
    """
    if not (opts.unique_for or opts.concurrency or opts.rate_limit or opts.order_key):
        return None
    unique_key = _key(opts.unique_key, args, kwargs)
    if opts.unique_for and unique_key is None:
        unique_key = f"{name}:{_args_hash(name, args, kwargs)}"
    return FlowControl(
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
    )


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


class JobLookup(Protocol):
    """Where a ``JobRef`` reads its job (``Conveyor`` is one)."""

    def get_job(self, job_id: str) -> JobRecord | None:
        """The stored job with its events, or None."""
        ...


class JobRef:
    """A handle to a stored job: its id, and ways to read its state and wait for its result.

    ``created`` is False when a unique job already existed (``id`` is then that job's id).
    Refs returned inside a ``with app.batch()`` block are provisional until the batch flushes
    its buffer (every 1,000 jobs and at the end of the block): ``status()`` is None until then.
    """

    __slots__ = ("_source", "created", "id")

    def __init__(self, job_id: str, created: bool = True, source: JobLookup | None = None) -> None:
        self.id = job_id
        self.created = created
        self._source = source

    def __repr__(self) -> str:
        return f"<JobRef {self.id}{'' if self.created else ' (existing)'}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobRef) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def status(self) -> JobRecord | None:
        """The job's record with its state and events, or None if it is not stored."""
        if self._source is None:
            raise RuntimeError("this JobRef is not bound to an app; use app.get_job(ref.id)")
        return self._source.get_job(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job to finish and return its JSON-decoded result.

        Raises ``JobFailed`` when it ended failed, dead or cancelled, ``ResultTimeout`` after
        ``timeout`` seconds (None waits forever) and ``JobNotFound`` if it is not stored.
        Polls with a backoff from 5 ms to 200 ms.
        """
        waits = self._waits(timeout)
        try:
            while True:
                time.sleep(next(waits))
        except StopIteration as finished:
            return finished.value

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result`` for asyncio code: waits with ``asyncio.sleep`` between reads."""
        waits = self._waits(timeout)
        try:
            while True:
                await asyncio.sleep(next(waits))
        except StopIteration as finished:
            return finished.value

    def _waits(self, timeout: float | None) -> Generator[float, None, Any]:
        """Yields each pause between reads; returns the outcome once the job is finished.

        One generator serves the blocking and the asyncio waits, which differ only in how
        they sleep.
        """
        limit = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_FIRST
        while True:
            record = self.status()
            if record is None:
                raise JobNotFound(f"job {self.id} is not stored (never enqueued, or trimmed)")
            if record.state.terminal:
                return _outcome(record)
            yield self._pause(limit, delay, timeout)
            delay = min(delay * 2, _POLL_MAX)

    def _pause(self, limit: float | None, delay: float, timeout: float | None) -> float:
        """The next sleep: the backoff step, cut short at the limit; ``ResultTimeout`` past it."""
        if limit is None:
            return delay
        left = limit - time.monotonic()
        if left <= 0:
            raise ResultTimeout(f"job {self.id} did not finish within {timeout} s")
        return min(delay, left)


def _outcome(record: JobRecord) -> Any:
    if record.state is JobState.SUCCEEDED:
        return None if record.result is None else loads(record.result)
    raise JobFailed(record.id, record.state.value, record.message)



class SpecBuffer:
    """Specs collected and handed to the storage ``size`` at a time (bulk and batch enqueues).

    A ``JobRef`` given with a spec is updated in place at the flush, so it ends up with the id
    the storage reports (an existing unique job's id) and the right ``created`` flag.
    """

    def __init__(
        self, store: Callable[[Sequence[JobSpec]], list[EnqueueResult]], size: int = CHUNK_SIZE
    ) -> None:
        self._store = store
        self._size = size
        self._items: list[tuple[JobSpec, JobRef | None]] = []
        self._lock = threading.RLock()
        self.added = 0
        self.sent = 0

    def add(self, spec: JobSpec, ref: JobRef | None = None) -> None:
        """Buffer one spec; flushes when the buffer is full."""
        with self._lock:
            self._items.append((spec, ref))
            self.added += 1
            if len(self._items) >= self._size:
                self.flush()

    def flush(self) -> int:
        """Store every buffered spec now; returns how many were sent."""
        with self._lock:
            items, self._items = self._items, []
            if not items:
                return 0
            results = self._store([spec for spec, _ in items])
            for (_, ref), result in zip(items, results, strict=True):
                if ref is not None:
                    ref.id, ref.created = result.id, result.created
            self.sent += len(items)
            return len(items)
