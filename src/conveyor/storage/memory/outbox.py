"""The memory backend as a broker's outbox (``conveyor.storage.outbox.Outbox``).

A job's publish stamp is kept beside it, not in its record: readers never see it. A parked
job (flow control said no at ``start``) is due again as soon as the flow gate would admit it,
which ``publish_due`` asks the gate directly, so the ack that frees a key needs no hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from conveyor.core.job import EventKind, JobState
from conveyor.storage.memory.flow import ScanBudget
from conveyor.storage.memory.state import MemoryState
from conveyor.storage.outbox import Delivered, StartKind, StartReply, arrivals, mark, marked_by
from conveyor.storage.rules import DEADLINE_PASSED, REDELIVERED, broken_key


class MemoryOutbox:
    """``publish_due``, ``publish_failed``, ``start`` and ``bury`` over the memory backend's
    state."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state
        # job id -> when it is due again, and the version of the job it was stamped at: a
        # stamp speaks only for the stretch of pending it was made in
        self._stamps: dict[str, tuple[float, int]] = {}
        self._parked: set[str] = set()  # held back by flow control or a pause at ``start``

    def publish_due(self, queue: str, count: int, republish_after: float) -> list[str]:
        """Pending jobs of ``queue`` due to be published, stamped; see ``Outbox``."""
        with self.state.lock:
            stamps, parked = self._stamps, self._parked
            if queue in self.state.paused or count <= 0:
                return []
            now = self.state.now()
            out: list[str] = []
            for job_id in self.state.pending.get(queue, ()):
                entry = self.state.jobs[job_id]
                if job_id in parked:
                    # a key that breaks the key rule: due, so that its start ends it
                    if (broken_key(entry.rec.flow) is None
                        and not self.state.flow.allows(entry.rec, now, ScanBudget())):
                        continue
                    parked.discard(job_id)
                else:
                    until, version = stamps.get(job_id, (now, entry.version))
                    if until > now and version == entry.version:
                        continue
                stamps[job_id] = (now + republish_after, entry.version)
                out.append(job_id)
                if len(out) >= count:
                    break
            return out

    def published(self, job_id: str, version: int) -> bool:
        """Whether the job, at its move ``version``, was handed to the broker and is not due
        again yet (explain's "in a broker, not yet delivered"; the caller holds the lock)."""
        stamp = self._stamps.get(job_id)
        return stamp is not None and stamp[1] == version

    def publish_failed(self, job_ids: Sequence[str]) -> None:
        """Unconfirmed publishes: due again at once."""
        with self.state.lock:
            stamps = self._stamps
            for job_id in job_ids:
                stamps.pop(job_id, None)

    def order_keys(self, queue: str, job_ids: Sequence[str]) -> list[str | None]:
        """Each job's order key; see ``Outbox.order_keys``."""
        with self.state.lock:
            found = [self.state.jobs.get(job_id) for job_id in job_ids]
            return [e.rec.flow.order_key if e is not None and e.rec.queue == queue
                    and e.rec.flow is not None else None for e in found]

    def bury(self, job_ids: Sequence[str], reason: str) -> int:
        """Pending or active jobs the broker gave up on → dead; see ``Outbox.bury``."""
        with self.state.lock:
            now = self.state.now()
            buried = 0
            for job_id in job_ids:
                entry = self.state.jobs.get(job_id)
                if entry is None or entry.rec.state not in (JobState.PENDING, JobState.ACTIVE):
                    continue
                entry.rec.message = reason
                entry.token = None  # a holder's late ack is refused
                self.state.move(entry, JobState.DEAD, EventKind.DEAD, now, worker=entry.rec.worker,
                                message=reason)
                buried += 1
            return buried

    def start(self, queue: str, deliveries: Sequence[Delivered], worker_id: str,
              lease_seconds: float, max_recoveries: int = 5) -> list[StartReply]:
        """Lease delivered jobs; see ``Outbox.start``."""
        with self.state.lock:
            now = self.state.now()
            budget = ScanBudget()
            self.state.flow.forget_idle_rates(now)
            replies: list[StartReply] = []
            seen: set[str] = set()
            for job_id, redelivered, message in arrivals(deliveries):
                if job_id in seen:  # a second message for it in one call: a duplicate
                    replies.append(StartReply(job_id, StartKind.RUNNING))
                    continue
                seen.add(job_id)
                replies.append(self._start_one(queue, job_id, redelivered, message, worker_id,
                                               lease_seconds, max_recoveries, now, budget))
            return replies

    def _start_one(self, queue: str, job_id: str, redelivered: bool, message: str | None,
                   worker_id: str, lease_seconds: float, max_recoveries: int, now: float,
                   budget: ScanBudget) -> StartReply:
        entry = self.state.jobs.get(job_id)
        if entry is None or entry.rec.queue != queue:
            return StartReply(job_id, StartKind.FOREIGN)
        state = entry.rec.state
        if state is JobState.ACTIVE:
            if not redelivered or not marked_by(entry.token, message):
                return StartReply(job_id, StartKind.RUNNING)
            self.state.recover([entry], max_recoveries, now, REDELIVERED)  # as a lease expiry
            state = entry.rec.state
        if state is not JobState.PENDING:
            return StartReply(job_id, StartKind.SKIPPED)
        rec = entry.rec
        stamps, parked = self._stamps, self._parked
        expired = rec.deadline is not None and now > rec.deadline
        broken = None if expired or rec.queue in self.state.paused else broken_key(rec.flow)
        if expired or broken is not None:
            self.state.end_unstarted(entry, EventKind.DEAD if broken else EventKind.EXPIRED,
                                     broken or DEADLINE_PASSED, now)
            stamps.pop(job_id, None)
            parked.discard(job_id)
            return StartReply(job_id, StartKind.SKIPPED)
        if rec.queue in self.state.paused or not self.state.flow.allows(rec, now, budget):
            parked.add(job_id)
            return StartReply(job_id, StartKind.PARKED)
        self.state.flow.reserve(rec, budget, now)
        stamps.pop(job_id, None)  # back to pending later (retry, recovery): due at once
        parked.discard(job_id)
        job = self.state.lease(entry, worker_id, now, lease_seconds)
        if message is not None:  # the lease remembers the message that started it
            entry.token = job.token + mark(message)
            job = dataclasses.replace(job, token=entry.token)
        return StartReply(job_id, StartKind.STARTED, job)
