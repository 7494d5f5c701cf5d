"""Durable jobs, what job code calls (docs/durable.md): ``current_job().step(...)``,
``sleep``, ``sleep_until``, ``wait_for``, ``receive`` and ``iterate``.

The model is DBOS's and Temporal's replay: a job that left its worker (to sleep, to wait, or
because its worker died) runs again from the top, and every step it recorded returns its
stored result without running. Code between steps is not durable: it runs again on every
replay, so it must be deterministic (no clock, no randomness, no I/O: put those in steps).

A sleep or a wait raises ``Suspend`` (a ``BaseException``, so ``except Exception`` in job
code does not swallow it): the worker acknowledges the attempt ``SUSPENDED`` and the store
keeps the job ``scheduled`` until its time, or until what it waits for arrives. At-least-once
per step is the physical limit: a step killed after its effect and before its record runs
again. ``step_id`` (stable across attempts) is the idempotency key to give the world.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from conveyor.client.iteration import Iteration
from conveyor.client.payloads import JobData
from conveyor.core.envelope import literal, parse_result
from conveyor.core.serializer import dumps, oversize
from conveyor.core.steps import EVENT, FOREVER, MESSAGE, Step, StepStatus, Wait
from conveyor.core.text import check_name, key_fault
from conveyor.core.versions import VERSION_STEP
from conveyor.errors import (
    BlobMissing,
    InvalidKeyError,
    LeaseLost,
    PayloadError,
    StepFailed,
    Suspend,
    UnsealError,
)
from conveyor.storage.base import Storage

__all__ = ["DurableCalls", "DurableReach", "bound_of", "step_retry_delay", "stored_value",
           "value_json"]

T = TypeVar("T")

#: The step running in this thread or task: ``current_job().step_id``.
_current_step: ContextVar[str | None] = ContextVar("conveyor_step", default=None)


class DurableReach(Protocol):
    """What a job's durable calls reach beyond the job, handed over in its ``JobRuntime``
    (the app's ``Client`` is one): the store's durable records and clock, how the app seals
    and offloads job data, and the size limit of what stays inline."""

    @property
    def storage(self) -> Storage:
        """The app's storage."""
        ...

    @property
    def data(self) -> JobData:
        """The app's keys and offload (docs/job-data.md)."""
        ...

    @property
    def max_payload(self) -> int:
        """The largest JSON text stored inline."""
        ...


def bound_of(kind: str, *whose: str) -> tuple[str, ...]:
    """What a durable value is sealed to: a step's result or a loop's cursor to its job and
    step (``"step", job id, step``), a message to its job (``"message", job id``), an event
    to its name and key (``"event", name, key``). A ciphertext copied elsewhere does not
    open."""
    return (kind, *whose)


def value_json(value: Any, what: str) -> str:
    """A durable value's JSON (``literal``: a dict holding ``"$conveyor"`` escaped);
    ``PayloadError`` naming ``what`` for a value that is not JSON."""
    try:
        return dumps(literal(value))
    except PayloadError as exc:
        raise PayloadError(f"{what} is not JSON ({exc})") from exc


def stored_value(data: JobData, text: str, bound: tuple[str, ...], *, seal: bool,
                 offload: bool, max_payload: int, what: str) -> str:
    """A durable value's JSON (``value_json``) as stored: sealed when ``seal`` (bound to
    ``bound``), kept by reference (a blob of the job's) past the offload's threshold when
    ``offload`` (docs/job-data.md). ``PayloadError`` naming ``what`` when more than
    ``max_payload`` bytes would stay inline."""
    owner = bound[1] if bound[0] != "event" else ""
    stored = data.encode_value(text, owner, bound, seal=seal, offload=offload,
                               head={"a": list(bound)})
    size = oversize(stored, max_payload)
    if size:
        raise PayloadError(f"{what} is {size:,} bytes, over max_payload: store large data "
                           "elsewhere and pass a reference (or Conveyor(offload=Offload()))")
    return stored


def step_retry_delay(tries: int) -> float:
    """Seconds before a step's next try (1-based ``tries`` failed so far): 1, 2, 4, … s,
    at most five minutes (DBOS's default interval and rate)."""
    return float(min(2 ** max(tries - 1, 0), 300))


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class DurableCalls:
    """The durable half of ``JobContext`` (a mixin: the context's own attributes below)."""

    job_id: str
    name: str
    token: str
    attempt: int
    worker_id: str
    #: What the calls reach beyond the job (``JobRuntime.durable``; the context sets it).
    _reach: DurableReach | None = None
    #: How long before a wait began an event still counts (the job type's option; the
    #: worker sets it).
    event_window: float = 0.0
    #: The version of the code running the job (its type's ``version=``): recorded as the
    #: job's starting version at its first durable call (core/versions.py).
    version: int | None = None
    _stopping: bool = False
    _records: dict[str, Step] | None = None
    _names: Counter[str] | None = None

    if TYPE_CHECKING:  # the context's own (JobContext), declared for the checker only
        @property
        def cancelled(self) -> bool:
            """True once cancellation was requested."""
            ...

        def progress(self, done: int, total: int | None = None) -> None:
            """Report progress."""
            ...

    # -- plumbing ---------------------------------------------------------------------------

    def _host(self) -> DurableReach:
        if self._reach is None or not self.token:
            raise RuntimeError("durable calls (step, sleep, wait_for, receive, iterate) need "
                               "a job run by a worker of its app")
        return self._reach

    def _known(self, name: str) -> Step | None:
        if self._records is None:
            history = self._host().storage.durable.read(self.job_id)
            self._records = {s.name: s for s in history.steps}
        return self._records.get(name)

    def _name(self, base: str) -> str:
        """The record name of this call: a name used again in the same run gets ``#2``,
        ``#3``… in the order the calls come (the replay makes the same calls in order)."""
        if _current_step.get() is not None:
            raise RuntimeError(f"{base}: durable calls cannot be made inside a step; make "
                               "them from the job's own code")
        check_name("step name", base)
        if base.startswith("@"):  # conveyor's own records (core/versions.py)
            raise ValueError(f"step name {base!r}: names beginning with @ are reserved")
        if self._names is None:
            self._names = Counter()
        self._names[base] += 1
        count = self._names[base]
        return base if count == 1 else f"{base}#{count}"

    def _save(self, step: Step | None) -> None:
        """Record ``step`` (None: only the job's starting version, when not yet recorded),
        with that version in the same write at the job's first."""
        steps = [s for s in (self._unversioned(), step) if s is not None]
        if not steps:
            return
        if not self._host().storage.durable.save_steps(self.job_id, self.token, steps):
            raise LeaseLost(f"job {self.job_id} lost its lease: step {steps[-1].name} not "
                            "recorded")
        assert self._records is not None
        self._records.update((s.name, s) for s in steps)

    def _unversioned(self) -> Step | None:
        """The record of the version starting this job, when its type has one and no
        version is recorded yet (a replay finds the first one: it is final)."""
        if self.version is None or self._known(VERSION_STEP) is not None:
            return None
        now = self._now()
        return Step(VERSION_STEP, StepStatus.OK, result=str(self.version), started=now,
                    ended=now, attempt=self.attempt)

    def _now(self) -> float:
        return self._host().storage.now()

    def _stored(self, key: str, text: str) -> str:
        """A step's result or a loop's cursor (``value_json``) as stored: sealed when the
        job's data is, by reference when large (docs/job-data.md)."""
        host = self._host()
        return stored_value(host.data, text, bound_of("step", self.job_id, key),
                            seal=host.data.seals(self.name), offload=True,
                            max_payload=host.max_payload, what=f"step {key}'s result")

    def _opened(self, key: str, text: str | None, bound: tuple[str, ...] | None = None) -> Any:
        """The value of a recorded step (or of what a wait received: ``bound``)."""
        if text is None:
            return None
        try:
            return self._host().data.open_value(text, bound or bound_of("step", self.job_id,
                                                                        key))
        except (UnsealError, BlobMissing) as exc:
            raise type(exc)(f"job {self.name} {self.job_id}: the record of step {key} cannot "
                            f"be read: {exc}") from None

    @property
    def step_id(self) -> str:
        """Inside a step: ``<job id>/<step name>``, the same on every attempt — the
        idempotency key to give a payment API or a mailer, since a step killed after its
        effect and before its record runs again."""
        current = _current_step.get()
        if current is None:
            raise RuntimeError("step_id is known only inside a step's function")
        return current

    @property
    def stopping(self) -> bool:
        """True once the worker running the job is stopping (``ctx.iterate`` checkpoints and
        hands the job back at the next item)."""
        return self._stopping

    def request_stop(self) -> None:
        """Called by the worker as it begins to stop."""
        self._stopping = True

    # -- steps ------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., T], /, *args: Any, retries: int = 0,
             retry_in: float | Callable[[int], float] | None = None, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` once for this job: its JSON result is recorded under
        the lease, and every later attempt gets the recorded result without running it.

        ``name`` is unique per job: used again in a run (a loop), the calls are named
        ``name``, ``name#2``… in order. An error with ``retries=0`` (the default) is the
        job's: the job's own retries run it again. With ``retries=N`` the step is tried up
        to N more times, ``retry_in`` seconds apart (a number, or a function of the tries
        failed so far; default 1, 2, 4… s), the job sleeping between tries; past them its
        error is recorded and ``StepFailed`` raised, on this and every later attempt."""
        key = self._name(name)
        rec = self._known(key)
        if rec is not None and rec.status == StepStatus.OK:
            return cast(T, self._opened(key, rec.result))
        if rec is not None and rec.status == StepStatus.ERROR:
            raise StepFailed(key, self._clear(rec.error))
        tries = rec.tries if rec is not None and rec.status == StepStatus.RETRYING else 0
        if rec is not None and rec.until is not None and self._now() < rec.until:
            raise Suspend(rec.until, f"step {key}: try {tries + 1} at {_when(rec.until)}")
        started = self._now()
        marker = _current_step.set(f"{self.job_id}/{key}")
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:
            if retries <= 0:
                raise
            self._failed(key, exc, tries + 1, retries, retry_in, started)
            raise  # unreachable: _failed raises
        finally:
            _current_step.reset(marker)
        text = None if value is None else value_json(value, f"step {key}'s result")
        self._save(Step(key, StepStatus.OK, started=started, ended=self._now(),
                        result=None if text is None else self._stored(key, text),
                        attempt=self.attempt, tries=tries + 1))
        # what a replay returns: the JSON form (a tuple is a list), not the object itself
        return cast(T, None if text is None else parse_result(text)[0])

    def _clear(self, error: Mapping[str, str] | None) -> dict[str, str]:
        """A recorded error with its message opened (sealed as the job's own words)."""
        out = dict(error or {})
        if "message" in out:
            out["message"] = self._host().data.open_text(out["message"]) or ""
        return out

    def _failed(self, key: str, exc: Exception, tries: int, retries: int,
                retry_in: float | Callable[[int], float] | None, started: float) -> None:
        data = self._host().data
        error = {"type": type(exc).__qualname__,
                 "message": data.seal_text(self.job_id, self.name, str(exc)) or ""}
        now = self._now()
        if tries > retries:
            self._save(Step(key, StepStatus.ERROR, error=error, started=started, ended=now,
                            attempt=self.attempt, tries=tries))
            raise StepFailed(key, self._clear(error)) from exc
        delay = (step_retry_delay(tries) if retry_in is None else
                 retry_in(tries) if callable(retry_in) else retry_in)
        until = now + max(float(delay), 0.0)
        self._save(Step(key, StepStatus.RETRYING, error=error, started=started, ended=now,
                        attempt=self.attempt, tries=tries, until=until))
        raise Suspend(until, f"step {key}: try {tries} failed ({error['type']}); "
                             f"next at {_when(until)}") from exc

    # -- sleeping and waiting ---------------------------------------------------------------

    def sleep(self, seconds: float, *, name: str = "sleep") -> None:
        """Sleep ``seconds`` without holding a worker: the job leaves it and runs again
        (from the top, its steps replayed) once the time has come, on any worker."""
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"sleep needs a finite number of seconds >= 0, not {seconds!r}")
        self._sleep(name, lambda now: now + float(seconds))

    def sleep_until(self, when: float | datetime, *, name: str = "sleep") -> None:
        """Sleep until ``when`` (epoch seconds, or an aware ``datetime``), as ``sleep``."""
        ts = when.timestamp() if isinstance(when, datetime) else float(when)
        self._sleep(name, lambda now: ts)

    def _sleep(self, name: str, wake: Callable[[float], float]) -> None:
        key = self._name(name)
        rec = self._known(key)
        now = self._now()
        if rec is None or rec.until is None:
            until = wake(now)
            self._save(Step(key, StepStatus.OK, started=now, ended=now, attempt=self.attempt,
                            until=until))
        else:
            until = rec.until
        if now < until:
            raise Suspend(until, f"sleeping until {_when(until)}")

    def wait_for(self, event: str, key: str = "", *, timeout: float | None = None,
                 window: float | None = None, name: str | None = None) -> Any:
        """Wait, without holding a worker, for ``app.send_event(event, key, data)``: returns
        the event's data, or None after ``timeout`` seconds (None: no timeout). An event sent
        before the wait began counts only when sent at most ``window`` seconds before it
        (default: the job type's ``event_window``, 0 unless declared)."""
        if window is None:
            window = self.event_window
        check_name("event name", event)
        if key and (fault := key_fault(key)) is not None:
            raise InvalidKeyError(f"event key {fault}")
        return self._receive(Wait(EVENT, self._name(name or f"wait:{event}"), event, key,
                                  window=window), timeout)

    def receive(self, topic: str = "", *, timeout: float | None = None,
                name: str | None = None) -> Any:
        """The next message sent to this job with ``app.send(job_id, topic, data)`` (kept
        until received, in the order sent, each received once): its data, or None after
        ``timeout`` seconds. The job waits without holding a worker."""
        if topic:
            check_name("topic", topic)
        return self._receive(Wait(MESSAGE, self._name(name or f"receive:{topic}"), topic),
                             timeout)

    def _receive(self, wait: Wait, timeout: float | None) -> Any:
        bound = (bound_of(EVENT, wait.name, wait.key) if wait.kind == EVENT
                 else bound_of(MESSAGE, self.job_id))
        rec = self._known(wait.step)
        if rec is not None and rec.final:
            return self._opened(wait.step, rec.result, bound)
        if timeout is not None and not (math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"timeout must be a finite number of seconds >= 0 or None, "
                             f"not {timeout!r}")
        until = FOREVER if timeout is None else self._now() + timeout
        asked = Wait(wait.kind, wait.step, wait.name, wait.key, until, wait.window)
        self._save(None)  # a wait records no step: its version goes first
        got = self._host().storage.durable.receive(self.job_id, self.token, asked)
        if got is None:
            raise LeaseLost(f"job {self.job_id} lost its lease while waiting")
        if not got.done:
            raise Suspend(got.until, asked.describe(_when))
        assert self._records is not None
        self._records[wait.step] = Step(wait.step, result=got.data)
        return self._opened(wait.step, got.data, bound)


    # -- resumable loops --------------------------------------------------------------------

    def iterate(self, source: Sequence[T] | Callable[[Any], Iterable[Any]], *,
                cursor_key: str | Callable[[Any], Any] | None = None, every: int = 1000,
                seconds: float = 5.0, total: int | None = None,
                name: str = "iterate") -> Iterator[Any]:
        """Items of ``source``, resuming after the last checkpoint (docs/durable.md).

        ``source`` is a sequence (the cursor is the index) or a function given the cursor
        (None at first) returning the items after it. The cursor of an item is
        ``item[cursor_key]`` (or its attribute, or ``cursor_key(item)``); without a
        ``cursor_key`` the function yields ``(item, cursor)`` pairs. The cursor of the items
        done is checkpointed every ``every`` items or ``seconds`` seconds, progress reported;
        a cancel ends the job between items, a stopping worker hands it back at the last
        checkpoint, a crash resumes there (items after it run again: at least once)."""
        return Iteration(self, self._name(name), source, cursor_key, every, seconds,
                         total).run()
