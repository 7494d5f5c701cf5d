"""The jobs this worker process holds: running ones, and finished ones not yet acknowledged.

Shared by the fetcher (adds), executors (finish), the acker (acknowledges), the heartbeater
(extends every lease held, handles lost leases and cancellations) and the launcher (hard
shutdown). Whoever *claims* an entry first decides its outcome: the job itself, the timeout
watchdog, or the hard shutdown; the others see ``claim()`` return False and drop theirs.

Entries are keyed by lease token, never by job id: a job that timed out is retried, and its
retry may run in this process while the abandoned thread of the earlier attempt still runs.
Both attempts carry the same job id; only the token tells them apart, so the late thread can
never claim (and so silence) the attempt that replaced it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from conveyor.client.context import JobContext
from conveyor.client.registry import JobFunction
from conveyor.core.job import LeasedJob
from conveyor.storage.workers import BusySlot

__all__ = ["Entry", "InFlight"]


@dataclass(eq=False, slots=True)
class Entry:
    """One running job: its lease, function, decoded arguments and context."""

    job: LeasedJob
    fn: JobFunction
    ctx: JobContext
    args: list[Any]
    kwargs: dict[str, Any]
    started: float
    deadline: float | None = None  # clock time after which the job has timed out
    lost: bool = False  # the lease went to someone else: never acknowledge
    task: Any = None  # the asyncio task of an async job, to cancel it
    logged_at: float = field(default=0.0)
    #: An aggregated run (docs/aggregation.md): ``fn`` is the job's aggregator, and
    #: ``members`` the jobs it gathered under this entry's lease (the lead not among them).
    aggregator: bool = False
    members: list[Entry] = field(default_factory=list)
    member: Any = None  # this job's ``conveyor.Member`` in a run, with its outcome
    #: Where a ``def`` job runs: ``"thread"`` (the pool's thread) or ``"process"`` (a job
    #: process, worker/job_processes.py), from its options or the worker's ``--executor``.
    executor: str = "thread"


class InFlight:
    """Running entries by lease token, plus a wake-up for the fetcher when a slot frees."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._running: dict[str, Entry] = {}
        self._slot_freed = threading.Event()
        # The slots running jobs take beyond one each (``LeasedJob.cost``): touched only
        # for a job that costs more, so a plain job's path is as before.
        self._extra = 0
        self._extra_lock = threading.Lock()

    def add(self, entry: Entry) -> None:
        """Register a job that is about to run."""
        self._running[entry.job.token] = entry
        if entry.job.cost > 1:
            with self._extra_lock:
                self._extra += entry.job.cost - 1

    def claim(self, entry: Entry, wake: bool = True) -> bool:
        """Take the right to acknowledge ``entry``; True only for the first caller. Without
        ``wake`` the fetcher is not woken: the caller does (``wake``) if the slot stays free.

        ``dict.pop`` is atomic under the GIL, so no lock is needed on this per-job path.
        """
        if self._running.pop(entry.job.token, None) is not entry:
            return False
        if entry.job.cost > 1:
            with self._extra_lock:
                self._extra -= entry.job.cost - 1
        if wake:
            self.wake()
        return True

    @property
    def free(self) -> int:
        """Slots not taken by a running job (a job takes its ``cost`` of them)."""
        return self.capacity - len(self._running) - self._extra

    def __len__(self) -> int:
        return len(self._running)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._running.values()))

    def get(self, token: str) -> Entry | None:
        """The running entry holding the lease ``token``, or None."""
        return self._running.get(token)

    def holds(self, entry: Entry) -> bool:
        """True while ``entry`` is still running here (nobody has claimed it)."""
        return self._running.get(entry.job.token) is entry

    def wait_for_slot(self, timeout: float) -> bool:
        """Block until a slot is free or ``timeout`` passes; True when one is free."""
        return self.wait_until(lambda: self.free > 0, timeout)

    def wait_until(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Block until ``ready()`` (re-checked whenever a job ends) or ``timeout``."""
        if ready():
            return True
        self._slot_freed.clear()
        if ready():  # a job ended between the check and the clear
            return True
        self._slot_freed.wait(timeout)
        return ready()

    def wake(self) -> None:
        """Wake a fetcher waiting for a slot (or for ``wait_until``'s condition)."""
        if not self._slot_freed.is_set():  # setting it again would notify nobody, at a cost
            self._slot_freed.set()

    def leases(self) -> dict[str, str]:
        """Job id → lease token of every running job this process still owns (the members
        of an aggregated run share its lead's)."""
        out: dict[str, str] = {}
        for e in self:
            if not e.lost:
                out[e.job.id] = e.job.token
                out.update((m.job.id, m.job.token) for m in list(e.members))
        return out

    def member(self, token: str, job_id: str) -> Entry | None:
        """The member ``job_id`` of the aggregated run holding ``token``, or None."""
        entry = self._running.get(token)
        if entry is None:
            return None
        return next((m for m in list(entry.members) if m.job.id == job_id), None)

    def busy(self) -> tuple[BusySlot, ...]:
        """What each busy slot runs, for the worker registry."""
        return tuple(BusySlot(e.job.id, e.job.name, e.job.queue, e.started) for e in self)
