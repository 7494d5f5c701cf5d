"""A signal to scale on: how many workers each queue can use now (``conveyor scale-hint``,
the ``conveyor_desired_workers{queue}`` gauge; docs/operations.md, "The scale signal").

Queue depth alone scales workers that flow control would leave idle: 10,000 jobs behind a
concurrency key of limit 3 can use 3 slots, whatever the fleet. So the hint is computed from
facts read through the ``Inspector`` (``read_facts``) by one pure function
(``desired_workers``), which the tests drive directly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conveyor.core.job import FlowControl, JobState
from conveyor.storage.base import Inspector

__all__ = ["DEFAULT_LATENCY_TARGET", "DEFAULT_SLOTS", "SAMPLE", "KeyLoad", "QueueFacts",
           "ScaleHint", "desired_workers", "read_facts", "scale_hints", "scale_view"]

#: Seconds a ready job may wait before it starts (``--latency-target``).
DEFAULT_LATENCY_TARGET = 30.0
#: Slots per worker when none is given and no worker is live (``conveyor worker -c``'s default).
DEFAULT_SLOTS = 10
#: Ready and running jobs read per queue for their flow-control keys; a larger backlog is
#: taken to be like the jobs read (its groups' shares scaled up).
SAMPLE = 1000
#: Newest succeeded jobs of a queue whose run times give the mean run time.
RUN_TIME_SAMPLE = 50
_PAGE = 500


@dataclass(frozen=True, slots=True)
class KeyLoad:
    """The ready and running jobs of one limit (a concurrency, order or rate key), or of
    no limit (``kind`` "free"), and how many slots that limit lets them use (None: any)."""

    kind: str  # "free", "concurrency", "order", "rate" or "breaker"
    key: str
    ready: int
    running: int
    cap: int | None


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """What the hint of one queue is computed from, as read from the Inspector."""

    queue: str
    paused: bool
    ready: int  # pending: could start now
    running: int  # active
    run_time: float | None  # mean seconds of its recent succeeded jobs (None: none known)
    loads: tuple[KeyLoad, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ScaleHint:
    """The hint for one queue: the slots its work can use and the workers that makes."""

    queue: str
    workers: int
    slots: int
    ready: int
    running: int
    capped: int  # slots the limits took away from what the backlog alone would want
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """JSON form (``conveyor scale-hint --json``)."""
        return {"queue": self.queue, "workers": self.workers, "slots": self.slots,
                "ready": self.ready, "running": self.running, "capped": self.capped,
                "reason": self.reason}


def desired_workers(facts: QueueFacts, slots_per_worker: int,
                    latency_target: float = DEFAULT_LATENCY_TARGET) -> ScaleHint:
    """How many workers of ``slots_per_worker`` slots the queue can use now.

    Per limit group g (the jobs of one concurrency, order or rate key, and the jobs under
    none), with R_g ready and A_g running jobs (each counted by its cost), d the mean run time
    and T the latency target:

        wanted_g = A_g + min(R_g, ceil(R_g * d / T))     (d unknown or T = 0: A_g + R_g)
        slots    = sum over g of min(wanted_g, cap_g)
        workers  = ceil(slots / slots_per_worker);  0 when the queue is paused

    ``cap_g`` is max(A_g, limit): the concurrency limit of a concurrency key (its used plus
    free slots), 1 for an order key, the rate limit of a rate key (at most ``rate_limit`` of
    its jobs start per window; with a concurrency key too, the smaller), 0 for the key of an
    open or half-open breaker (its jobs wait for the cool-down or the probe: more workers
    start none of them), and no cap for jobs without a limit. A slot runs T / d jobs within
    the target, so R_g * d / T slots clear the backlog in time; more would idle.
    """
    if slots_per_worker < 1:
        raise ValueError("slots per worker must be at least 1")
    if latency_target < 0 or not math.isfinite(latency_target):
        raise ValueError("the latency target must be a finite number of seconds >= 0")
    if facts.paused:
        return ScaleHint(facts.queue, 0, 0, facts.ready, facts.running, 0, "paused")
    loads = facts.loads or (KeyLoad("free", "", facts.ready, facts.running, None),)
    slots = capped = 0
    for load in loads:
        wanted = load.running + _for_ready(load.ready, facts.run_time, latency_target)
        # the running jobs hold their slots whatever the cap (a limit lowered meanwhile)
        usable = wanted if load.cap is None else min(wanted, max(load.running, load.cap))
        slots += usable
        capped += wanted - usable
    workers = math.ceil(slots / slots_per_worker)
    if not slots:
        reason = "idle"
    elif capped:
        reason = f"limits leave {capped} wanted slot(s) unusable"
    else:
        reason = "backlog"
    return ScaleHint(facts.queue, workers, slots, facts.ready, facts.running, capped, reason)


def _for_ready(ready: int, run_time: float | None, target: float) -> int:
    if not ready or not run_time or target <= 0:
        return ready
    return min(ready, math.ceil(ready * run_time / target))


def read_facts(inspector: Inspector, queue: str, paused: bool, ready: int, running: int,
               sample: int = SAMPLE, held: frozenset[str] = frozenset()) -> QueueFacts:
    """The facts of one queue: its ready and running jobs grouped by limit (from up to
    ``sample`` of each, scaled to the counts), each counted by the worker slots it takes
    (its ``cost``, docs/scheduling.md), and its mean run time. ``held``: the keys of open
    and half-open breakers."""
    groups: dict[tuple[str, str], list[int]] = {}  # (kind, key) -> [ready, running, cap]
    for state, count, slot in ((JobState.PENDING, ready, 0), (JobState.ACTIVE, running, 1)):
        seen = _jobs(inspector, queue, state, min(count, sample))
        scale = count / len(seen) if seen else 0.0
        tally: dict[tuple[str, str], int] = {}
        for flow in seen:
            kind, key, cap = _group(flow, held)
            tally[(kind, key)] = tally.get((kind, key), 0) + (flow.cost if flow else 1)
            entry = groups.setdefault((kind, key), [0, 0, cap])
            if cap >= 0:  # jobs of one key giving different limits: the smallest binds
                entry[2] = min(entry[2], cap)
        for name, n in tally.items():
            groups[name][slot] = round(n * scale)
    loads = tuple(KeyLoad(kind, key, r, a, None if cap < 0 else cap)
                  for (kind, key), (r, a, cap) in sorted(groups.items()))
    return QueueFacts(queue, paused, ready, running, _run_time(inspector, queue), loads)


def _group(flow: FlowControl | None, held: frozenset[str]) -> tuple[str, str, int]:
    """(kind, key, cap; -1 for none) of the limit that bounds a job the most."""
    if flow is not None:
        if flow.breaker_key is not None and flow.breaker_key in held:
            return "breaker", flow.breaker_key, 0
        if flow.order_key:
            return "order", flow.order_key, 1
        if flow.concurrency_key:
            cap = flow.concurrency_limit
            if flow.rate_key:
                cap = min(cap, flow.rate_limit)
            return "concurrency", flow.concurrency_key, cap
        if flow.rate_key:
            return "rate", flow.rate_key, flow.rate_limit
    return "free", "", -1


def _jobs(inspector: Inspector, queue: str, state: JobState,
          limit: int) -> list[FlowControl | None]:
    found: list[FlowControl | None] = []
    while len(found) < limit:
        page = inspector.list_jobs(state=state, queue=queue, offset=len(found),
                                   limit=min(_PAGE, limit - len(found)))
        found.extend(r.flow for r in page)
        if len(page) < _PAGE:
            break
    return found


def _run_time(inspector: Inspector, queue: str) -> float | None:
    done = inspector.list_jobs(state=JobState.SUCCEEDED, queue=queue, limit=RUN_TIME_SAMPLE,
                               newest_first=True)
    spans = [r.finished_at - r.started_at for r in done
             if r.finished_at is not None and r.started_at is not None]
    return sum(spans) / len(spans) if spans else None


def scale_hints(inspector: Inspector, slots_per_worker: int | None = None,
                latency_target: float = DEFAULT_LATENCY_TARGET,
                queues: Iterable[str] | None = None) -> list[ScaleHint]:
    """The hint of every queue (or of ``queues``). Slots per worker default to the live
    workers' mean, else ``DEFAULT_SLOTS``."""
    wanted = None if queues is None else set(queues)
    if slots_per_worker is None:
        slots_per_worker = live_slots(inspector)
    hints: list[ScaleHint] = []
    held = frozenset(b.key for b in inspector.breakers() if b.holding)
    for q in inspector.queues():
        if wanted is not None and q.name not in wanted:
            continue
        facts = read_facts(inspector, q.name, q.paused, q.pending, q.active, held=held)
        hints.append(desired_workers(facts, slots_per_worker, latency_target))
    return hints


def scale_view(inspector: Inspector, slots_per_worker: int | None = None,
               latency_target: float = DEFAULT_LATENCY_TARGET,
               queues: Iterable[str] | None = None) -> dict[str, Any]:
    """``scale_hints`` as JSON (``conveyor scale-hint --json``, ``/api/scale-hint``): the
    sum of the queues' workers, and each queue's hint by name."""
    hints = scale_hints(inspector, slots_per_worker, latency_target, queues)
    return {"total": sum(h.workers for h in hints),
            "queues": {h.queue: h.as_dict() for h in hints}}


def live_slots(inspector: Inspector) -> int:
    """Mean slots of the live running workers, rounded; ``DEFAULT_SLOTS`` when none."""
    sizes: Sequence[int] = [w.concurrency for w in inspector.workers() if w.status == "running"]
    return max(1, round(sum(sizes) / len(sizes))) if sizes else DEFAULT_SLOTS
