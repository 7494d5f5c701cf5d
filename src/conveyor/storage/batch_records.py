"""A batch as the storage reports it (``BatchStatus``, ``Inspector.get_batch``) and its
callbacks as the storage keeps them until they fire (``spec_to_wire``). Plain data."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conveyor.core.job import SHOWN_STATES, TERMINAL_STATES, FlowControl, JobSpec


@dataclass(slots=True)
class BatchStatus:
    """Live counters and timings of a batch, read in O(1) by ``Inspector.get_batch``."""

    id: str
    description: str | None
    meta: dict[str, Any]
    created_at: float
    total: int
    counts: dict[str, int]
    closed: bool = False
    cancelled: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    callbacks_fired: tuple[str, ...] = ()
    #: "batch", or "workflow" (the batch of a workflow's jobs).
    kind: str = "batch"

    @property
    def done(self) -> int:
        """Jobs in a terminal state."""
        return sum(self.counts.get(s.value, 0) for s in TERMINAL_STATES)

    @property
    def complete(self) -> bool:
        """Closed, and every job reached a terminal state."""
        return self.closed and self.done >= self.total

    @property
    def percent(self) -> float:
        """Share of jobs in a terminal state, 0 to 100."""
        return 100.0 if self.total == 0 else round(100.0 * self.done / self.total, 2)

    def eta(self, now: float) -> float | None:
        """Seconds until done at the rate seen so far, or None when it cannot be told yet."""
        if self.complete or not self.started_at or self.done == 0:
            return None
        rate = self.done / max(now - self.started_at, 1e-6)
        return (self.total - self.done) / rate

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """JSON-ready view: counts per state, total, percent, timings, ETA."""
        now = time.time() if now is None else now
        end = self.finished_at or now
        return {
            "id": self.id,
            "description": self.description,
            "meta": self.meta,
            "total": self.total,
            "counts": {s.value: self.counts.get(s.value, 0) for s in SHOWN_STATES},
            "done": self.done,
            "percent": self.percent,
            "closed": self.closed,
            "complete": self.complete,
            "cancelled": self.cancelled,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "elapsed": (end - self.started_at) if self.started_at else None,
            "eta": self.eta(now),
            "callbacks_fired": list(self.callbacks_fired),
            "kind": self.kind,
        }


def spec_to_wire(spec: JobSpec) -> dict[str, Any]:
    """A job not enqueued yet (a batch's callback) as backends store it until it fires."""
    return {
        "id": spec.id, "name": spec.name, "queue": spec.queue, "payload": spec.payload,
        "max_retries": spec.max_retries, "timeout": spec.timeout, "deadline": spec.deadline,
        "run_at": spec.run_at, "batch_id": spec.batch_id,
        "flow": spec.flow.to_wire() if spec.flow else None,
    }


def spec_from_wire(raw: Mapping[str, Any]) -> JobSpec:
    """Inverse of ``spec_to_wire``."""
    return JobSpec(
        id=raw["id"], name=raw["name"], queue=raw["queue"], payload=raw["payload"],
        max_retries=int(raw.get("max_retries", 25)), timeout=raw.get("timeout"),
        deadline=raw.get("deadline"), run_at=raw.get("run_at"), batch_id=raw.get("batch_id"),
        flow=FlowControl.from_wire(raw.get("flow")),
    )
