"""Why a job waits: its gates, in the order the fetch meets them (docs/scheduling.md).

``explain(inspector, job_id)`` reads ``Inspector.gate_facts`` (what the store's own fetch
decides by) and the live workers, and asks each gate of ``GATES`` in turn; each says, in one
sentence naming its holder or its time, whether it holds the job back. Adding a gate is one
more function in ``GATES`` at its place in that order, and the facts it reads in
``GateFacts``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from conveyor.core.breaker import HALF_OPEN, OPEN
from conveyor.core.job import EventKind, JobRecord, JobState
from conveyor.core.text import printable, shown
from conveyor.storage.base import Inspector
from conveyor.storage.gates import GateFacts, Holder
from conveyor.storage.workers import WorkerInfo

__all__ = ["GATES", "Explanation", "Reason", "Seen", "explain", "explain_facts"]


@dataclass(frozen=True, slots=True)
class Reason:
    """One gate's answer: ``gate`` names it (stable: ``paused``, ``concurrency``, …), ``text``
    is the sentence, ``until`` when it lifts by itself (if known), ``holders`` the jobs
    holding it."""

    gate: str
    text: str
    until: float | None = None
    holders: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (CLI ``--json``, the dashboard's API)."""
        return {"gate": self.gate, "text": self.text, "until": self.until,
                "holders": list(self.holders)}


@dataclass(frozen=True, slots=True)
class Explanation:
    """A job's state and the gates that hold it back now, in order (none: it starts at the
    next fetch, or is not waiting at all)."""

    job_id: str
    state: str
    status: str  # the badge: waiting | ready | running | finished
    reasons: tuple[Reason, ...] = ()

    @property
    def sentence(self) -> str:
        """The first reason, or what the job is doing: one line."""
        return self.reasons[0].text if self.reasons else _STATUS_TEXT[self.status]

    def lines(self) -> list[str]:
        """``waiting: …`` then ``then:    …`` for each further gate."""
        if not self.reasons:
            return [f"{self.status}: {_STATUS_TEXT[self.status]}"]
        first, *rest = self.reasons
        return [f"{self.status}: {first.text}", *(f"then:    {r.text}" for r in rest)]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"id": self.job_id, "state": self.state, "status": self.status,
                "sentence": self.sentence, "reasons": [r.as_dict() for r in self.reasons]}


_STATUS_TEXT = {
    "ready": "nothing holds it back: the next fetch of its queue takes it",
    "running": "a worker runs it",
    "finished": "it has finished",
    "waiting": "it waits",
}


@dataclass(frozen=True, slots=True)
class Seen:
    """What a gate looks at: the job's facts, the live workers, and whether a broker
    delivers the jobs."""

    facts: GateFacts
    workers: Sequence[WorkerInfo] = ()
    broker: bool = False
    serving: tuple[WorkerInfo, ...] = field(default=())

    @property
    def queue(self) -> str:
        """The job's queue."""
        return self.facts.job.queue


Gate = Callable[[Seen], "Reason | None"]


def _at(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%H:%M:%S UTC")


def _ago(seen: Seen, ts: float | None) -> str:
    return "" if ts is None else f"{max(0.0, seen.facts.now - ts):.0f} s ago"


def _ids(holders: Sequence[Holder], most: int = 3) -> str:
    names = ", ".join(h.id for h in holders[:most])
    return names + (f" and {len(holders) - most} more" if len(holders) > most else "")


def _pending(seen: Seen) -> bool:
    return seen.facts.job.state is JobState.PENDING


# -- the gates, in the order the fetch meets them -------------------------------------------

def _finished(seen: Seen) -> Reason | None:
    job = seen.facts.job
    if not job.state.terminal:
        return None
    when = "" if job.finished_at is None else f" at {_at(job.finished_at)}"
    return Reason("finished", f"it ended {job.state.value}{when}")


def _lease(seen: Seen) -> Reason | None:
    job = seen.facts.job
    if job.state is not JobState.ACTIVE:
        return None
    until = job.lease_expires_at
    return Reason("lease", f"leased by worker {job.worker} since "
                  f"{_at(job.started_at or seen.facts.now)}; the lease runs to "
                  f"{_at(until or seen.facts.now)} unless renewed", until=until,
                  holders=(job.worker or "",))


def _parents(seen: Seen) -> Reason | None:
    if seen.facts.job.state is not JobState.WAITING:
        return None
    parents = seen.facts.parents
    return Reason("parents", f"workflow parents not finished: {_ids(parents)} "
                  f"({len(parents)} left)", holders=tuple(p.id for p in parents))


def _aggregation(seen: Seen) -> Reason | None:
    facts = seen.facts
    if facts.job.state is not JobState.AGGREGATING:
        return None
    key = facts.job.flow.group_key if facts.job.flow else ""
    due = "" if facts.flush_at is None else f"; it runs at {_at(facts.flush_at)} at the latest"
    return Reason("aggregation", f"aggregation window of key {shown(key or '')}: "
                  f"{facts.members} member(s) waiting{due}", until=facts.flush_at)


def _scheduled(seen: Seen) -> Reason | None:
    job = seen.facts.job
    if job.state is not JobState.SCHEDULED:
        return None
    run_at = job.run_at or seen.facts.now
    flow = job.flow
    if flow is not None and flow.fold_key:
        kind = "debounce" if flow.fold_moves else "throttle"
        moves = "; a call of the key moves it" if flow.fold_moves else ""
        return Reason(kind, f"{kind} window of key {shown(flow.fold_key)}: runs at "
                      f"{_at(run_at)}{moves}", until=run_at)
    suspended = _suspension(job)
    if suspended is not None:  # a durable job's own sleep or wait (docs/durable.md)
        return Reason("durable", f"durable job {suspended}", until=run_at)
    return Reason("scheduled", f"scheduled for {_at(run_at)}", until=run_at)


def _suspension(job: JobRecord) -> str | None:
    """What a durable job said it waits for when it suspended (``sleeping until T``,
    ``waiting for event 'paid' key '7' until T``, its timeout the time it runs at the
    latest): the message of the event that made it scheduled, when that is a suspension."""
    last = next((ev for ev in reversed(job.events or ())
                 if ev.state == JobState.SCHEDULED.value), None)
    if last is None or last.kind != EventKind.SUSPENDED:
        return None
    return printable((last.message or "suspended")[:200])


def _retrying(seen: Seen) -> Reason | None:
    job = seen.facts.job
    if job.state is not JobState.RETRYING:
        return None
    run_at = job.run_at or seen.facts.now
    last = f" after: {shown(job.message)}" if job.message else ""
    return Reason("retrying", f"retrying at {_at(run_at)} (attempt {job.attempt + 1}){last}",
                  until=run_at)


def _broker(seen: Seen) -> Reason | None:
    if not (_pending(seen) and seen.broker):
        return None
    if seen.facts.published:
        return Reason("broker", "in the broker, not yet delivered to a worker")
    return Reason("broker", "waiting for a relay to publish it to the broker")


def _paused(seen: Seen) -> Reason | None:
    if not (_pending(seen) and seen.facts.paused):
        return None
    return Reason("paused", f"queue {shown(seen.queue)} is paused (conveyor resume "
                  f"{seen.queue})")


def _no_worker(seen: Seen) -> Reason | None:
    if not _pending(seen) or seen.serving:
        return None
    return Reason("no_worker", f"no live worker serves queue {shown(seen.queue)}")


def _too_costly(seen: Seen) -> Reason | None:
    job = seen.facts.job
    cost = job.flow.cost if job.flow else 1
    if not _pending(seen) or cost <= 1 or not seen.serving:
        return None
    largest = max(w.concurrency for w in seen.serving)
    if cost <= largest:
        return None
    return Reason("cost", f"it costs {cost} slots; the largest live worker serving "
                  f"queue {shown(seen.queue)} has {largest}")


def _concurrency(seen: Seen) -> Reason | None:
    facts = seen.facts
    flow = facts.job.flow
    if not _pending(seen) or flow is None or not flow.concurrency_key:
        return None
    used = sum(h.cost for h in facts.concurrency)
    if used + flow.cost <= flow.concurrency_limit:
        return None
    holders = sorted(facts.concurrency, key=lambda h: h.since or 0.0)
    oldest = _ago(seen, holders[0].since) if holders else ""
    return Reason("concurrency", f"per-key concurrency {shown(flow.concurrency_key)} at "
                  f"{used}/{flow.concurrency_limit} — held by {_ids(holders)}"
                  + (f" (oldest started {oldest})" if oldest else ""),
                  holders=tuple(h.id for h in holders))


def _order(seen: Seen) -> Reason | None:
    facts = seen.facts
    flow = facts.job.flow
    holder = facts.order_holder
    if not _pending(seen) or flow is None or not flow.order_key or holder is None:
        return None
    when = ""
    if holder.state == JobState.RETRYING.value and holder.since is not None:
        when = f", next run {_at(holder.since)}"
    return Reason("order", f"ordered key {shown(flow.order_key)} held by job {holder.id} "
                  f"({holder.state}{when})", holders=(holder.id,))


def _breaker(seen: Seen) -> Reason | None:
    facts = seen.facts
    brk = facts.breaker
    if not _pending(seen) or brk is None:
        return None
    if brk.state == HALF_OPEN and brk.probe_id and brk.probe_id != facts.job.id:
        return Reason("breaker", f"breaker {shown(brk.key)} is half-open: probe job "
                      f"{brk.probe_id} is running", holders=(brk.probe_id,))
    if brk.state != OPEN or brk.probe_at is None or facts.now >= brk.probe_at:
        return None  # the next fetch takes a probe of the key
    since = "" if brk.opened_at is None else f" since {_at(brk.opened_at)}"
    why = f" ({brk.reason})" if brk.reason else ""
    return Reason("breaker", f"held by breaker {shown(brk.key)}: open{since}{why}; next probe "
                  f"at {_at(brk.probe_at)}", until=brk.probe_at)


def _rate(seen: Seen) -> Reason | None:
    facts = seen.facts
    flow = facts.job.flow
    if not _pending(seen) or flow is None or not flow.rate_key or flow.rate_limit <= 0:
        return None
    starts = sorted(facts.rate_starts)
    if len(starts) < flow.rate_limit:
        return None
    # The window lets the next job start when enough of the oldest starts have left it.
    nxt = starts[len(starts) - flow.rate_limit] + flow.rate_period
    return Reason("rate", f"rate {shown(flow.rate_key)} allows the next start at {_at(nxt)} "
                  f"({len(starts)} of {flow.rate_limit} in the window)", until=nxt)


def _priority(seen: Seen) -> Reason | None:
    facts = seen.facts
    if not _pending(seen) or facts.higher <= 0:
        return None
    rises = ""
    if facts.age_next is not None and facts.band < 100:
        rises = f"; its priority {facts.band} rises by one at {_at(facts.age_next)}"
    return Reason("priority", f"{facts.higher} job(s) of higher priority ahead{rises}")


def _fair_share(seen: Seen) -> Reason | None:
    facts = seen.facts
    flow = facts.job.flow
    if not _pending(seen) or facts.keys_before_count <= 0:
        return None
    key = flow.fair_key if flow is not None and flow.fair_key else None
    named = ", ".join("(jobs without a key)" if k == "" else shown(k)
                      for k in facts.keys_before)
    more = facts.keys_before_count - len(facts.keys_before)
    tail = f" and {more} more" if more > 0 else ""
    who = f"key {shown(key)}" if key else "the jobs without a key"
    return Reason("fair_share", f"fair share: {who} served after keys {named}{tail}")


def _arrival(seen: Seen) -> Reason | None:
    facts = seen.facts
    if not _pending(seen) or facts.earlier <= 0:
        return None
    flow = facts.job.flow
    where = (f"of key {shown(flow.fair_key)}" if flow is not None and flow.fair_key
             else f"in queue {shown(seen.queue)}")
    return Reason("arrival", f"{facts.earlier} job(s) {where} ahead of it, in arrival order")


#: The gates in the order a job meets them; ``explain`` asks each. To add one, write
#: ``def _gate(seen) -> Reason | None`` reading its facts from ``seen.facts`` and insert it
#: where the fetch checks it.
GATES: list[Gate] = [
    _finished, _lease, _parents, _aggregation, _scheduled, _retrying, _broker, _paused,
    _no_worker, _too_costly, _concurrency, _order, _breaker, _rate, _priority, _fair_share,
    _arrival,
]


def explain_facts(facts: GateFacts, workers: Sequence[WorkerInfo] = (), *,
                  broker: bool = False) -> Explanation:
    """The explanation of ``facts`` given the live ``workers``."""
    job = facts.job
    serving = tuple(w for w in workers if job.queue in w.queues and w.status == "running")
    seen = Seen(facts, workers, broker, serving)
    reasons = tuple(r for gate in GATES if (r := gate(seen)) is not None)
    if job.state.terminal:
        status = "finished"
    elif job.state is JobState.ACTIVE:
        status = "running"
    elif reasons:
        status = "waiting"
    else:
        status = "ready"
    if status in ("finished", "running"):
        return Explanation(job.id, job.state.value, status, reasons[:1])
    return Explanation(job.id, job.state.value, status, reasons)


def explain(inspector: Inspector, job_id: str, *, broker: bool = False,
            workers: Sequence[WorkerInfo] | None = None, place: bool = True
            ) -> Explanation | None:
    """Why ``job_id`` waits (None for an unknown id). ``workers``: the live workers, when
    the caller read them already (a list explains many jobs); ``place=False``: without the
    job's place in its lineup (a list's short reason)."""
    facts = inspector.gate_facts(job_id, place)
    if facts is None:
        return None
    live = inspector.workers() if workers is None else workers
    return explain_facts(facts, live, broker=broker)
