"""What conveyor promises about a durable job, in plain Python (docs/durable.md).

A ``durable`` job of the model runs a fixed list of actions from the top on every attempt
(the replay of DBOS and Temporal): ``step`` (a step that returns its index), ``flaky`` (a
step whose first run ever raises, an error of the job's: retried), ``sleep`` (``SLEEP``
seconds) and ``wait`` (for the event ``EVENT`` with the job's id as its key, ``WAIT``
seconds at most). What is recorded returns at once; the first action not recorded runs: a
step is recorded, a sleep or a wait that cannot end yet suspends the job (``scheduled``
until its time, woken by the event it waits for). No conveyor code is used here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.model.promise import Expected

DURABLE = "durable"  # the model's durable job
EVENT = "model.event"
SLEEP = 30.0
WAIT = 20.0
FLAKY = "flaky"  # what a flaky step raises on its first run
WOKEN = "woken: what it waited for arrived"


def when(ts: float) -> str:
    """A wake time as a suspended job's message shows it."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass
class Wait:
    """The wait a durable job registered (one at a time)."""

    index: int
    until: float
    listening: bool = True
    answered: bool = False  # an event is in the inbox for it


@dataclass
class Progress:
    """What the store holds of a durable job beyond its record."""

    done: int = 0  # actions recorded, in order
    sleeps: dict[int, float] = field(default_factory=dict)  # sleep index -> wake time
    raised: set[int] = field(default_factory=set)  # flaky steps that raised once
    wait: Wait | None = None
    results: dict[int, str | None] = field(default_factory=dict)  # wait index -> its answer
    suspended_for: str | None = None  # "sleep" / "wait" while scheduled by a suspension


def run(job: Expected, now: float) -> None:
    """One attempt of a durable job, leased at ``now``: replay, then the first action not
    recorded, until the job suspends, errs or returns."""
    p = job.durable
    for index, action in enumerate(job.plan):
        if index < p.done:
            continue
        if action == "step":
            job.kinds.append("step")
        elif action == "flaky":
            if index not in p.raised:
                p.raised.add(index)
                job.errored(f"RuntimeError: {FLAKY}", now)
                return
            job.kinds.append("step")
        elif action == "sleep":
            if index not in p.sleeps:
                p.sleeps[index] = now + SLEEP
                job.kinds.append("step")
            if now < p.sleeps[index]:
                _suspend(job, "sleep", p.sleeps[index], f"sleeping until {when(p.sleeps[index])}")
                return
        elif action == "wait" and not _wait(job, index, now):
            return
        p.done = index + 1
    job.succeeded(logged=False)


def _wait(job: Expected, index: int, now: float) -> bool:
    """The wait at ``index``: True when it ended (recorded), False when the job suspended."""
    p = job.durable
    if p.wait is None or p.wait.index != index:
        p.wait = Wait(index, now + WAIT)
    wait = p.wait
    if wait.answered or now >= wait.until:
        p.results[index] = job.id if wait.answered else None
        p.wait = None
        job.kinds.append("step")
        return True
    _suspend(job, "wait", wait.until,
             f"waiting for event {EVENT!r} key {job.id!r} until {when(wait.until)}")
    return False


def _suspend(job: Expected, why: str, until: float, message: str) -> None:
    """The attempt ends ``suspended``: scheduled until ``until``, cancelled if asked."""
    if job.cancel_requested:
        job._end("cancelled", "cancelled", f"cancelled: {message}")
        return
    job._end("scheduled", "suspended", message)
    job.due = (until, until)
    job.durable.suspended_for = why


def event_sent(job: Expected) -> int:
    """``send_event(EVENT, key=job id)``: the waits it reached (the job's, if it listens and
    the job has not ended). A suspended wait is woken at once."""
    wait = job.durable.wait
    if wait is None or not wait.listening or job.terminal:
        return 0
    wait.listening, wait.answered = False, True
    if job.state == "scheduled" and job.durable.suspended_for == "wait":
        job.state, job.message, job.due = "pending", WOKEN, None
        job.durable.suspended_for = None
        job.kinds.append("woken")
    return 1
