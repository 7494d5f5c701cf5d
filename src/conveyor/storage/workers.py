"""A worker process as it reports itself in each heartbeat (``WorkerInfo``) and what its
busy slots run: the worker registry's records. Plain data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BusySlot:
    """What one busy processor slot of a worker runs, and since when."""

    job_id: str
    name: str
    queue: str
    started_at: float


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker process as it reports itself in each heartbeat."""

    id: str
    hostname: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: float
    status: str = "running"  # running | quiet | stopping
    busy: tuple[BusySlot, ...] = ()
    last_seen: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        """Dict form stored in the worker registry."""
        return {
            "id": self.id,
            "hostname": self.hostname,
            "pid": self.pid,
            "queues": list(self.queues),
            "concurrency": self.concurrency,
            "started_at": self.started_at,
            "status": self.status,
            "busy": [[b.job_id, b.name, b.queue, b.started_at] for b in self.busy],
            "last_seen": self.last_seen,
        }

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> WorkerInfo:
        """Inverse of ``to_wire``."""
        return cls(
            id=raw["id"],
            hostname=raw["hostname"],
            pid=int(raw["pid"]),
            queues=tuple(raw["queues"]),
            concurrency=int(raw["concurrency"]),
            started_at=float(raw["started_at"]),
            status=raw.get("status", "running"),
            busy=tuple(BusySlot(b[0], b[1], b[2], float(b[3])) for b in raw.get("busy", [])),
            last_seen=float(raw.get("last_seen", 0.0)),
        )
