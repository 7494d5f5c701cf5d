"""The memory backend's aggregation groups: promotion into a group, the poller's flush and
the worker's gather (the steps of ``storage/aggregation.py``, under the one lock)."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.core.job import EventKind, JobState, LeasedJob
from conveyor.storage import aggregation
from conveyor.storage.aggregation import Group, Rest
from conveyor.storage.memory.entry import Entry, group_of
from conveyor.storage.memory.state import MemoryState

_ALIVE = frozenset({JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING, JobState.ACTIVE})


class MemoryGroups:
    """Aggregation steps over ``MemoryState`` (the caller holds its lock)."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state

    def promote(self, entry: Entry, now: float) -> None:
        """A due scheduled or retrying job: pending, or back into its group."""
        rec = entry.rec
        member = aggregation.arrival(rec.id, rec.queue, rec.name, rec.flow)
        lead = member is None or bool(self.state.joins([member], now))
        self.state.move(entry, JobState.PENDING if lead else JobState.AGGREGATING,
                        EventKind.ENQUEUED, now)

    def flush(self, now: float, limit: int) -> int:
        """Send a lead for each due group; returns how many were sent."""
        due = sorted((g for g in self.state.groups.values() if g.flush_at <= now),
                     key=lambda g: g.flush_at)[:limit]
        txn = _Flush(self.state, now)
        _, drop = aggregation.flush(txn, due, now)  # groups are the stored objects
        for g in drop:
            del self.state.groups[g.id]
        return txn.sent

    def gather(self, lead: Entry, now: float) -> list[LeasedJob]:
        """Lease the members of the group ``lead`` leads, for its run."""
        rec = lead.rec
        if rec.flow is None or not rec.flow.group_key:
            return []
        gid = group_of(rec)
        group = self.state.groups.get(gid)
        if group is None:
            return []
        members = self.state.members[gid]
        taken = [self.state.jobs[i] for i in list(members)[:max(group.max_size - 1, 0)]]
        leased = [self._take(e, lead, now) for e in taken]
        rest = Rest(min(len(members), group.max_size), next(iter(members.values()), None))
        if not aggregation.gather(group, rec.id, rest, now):
            del self.state.groups[gid]
        return leased

    def _take(self, entry: Entry, lead: Entry, now: float) -> LeasedJob:
        expires = lead.rec.lease_expires_at or now
        return self.state.lease(entry, lead.rec.worker or "", now, expires - now,
                                token=lead.token, lead=lead.rec.id)


class _Flush:
    """``aggregation.FlushTxn`` over the memory backend."""

    def __init__(self, state: MemoryState, now: float) -> None:
        self._state = state
        self._now = now
        self.sent = 0

    def alive(self, leads: Sequence[str]) -> set[str]:
        jobs = self._state.jobs
        return {i for i in leads if (e := jobs.get(i)) is not None and e.rec.state in _ALIVE}

    def oldest(self, group: Group) -> str | None:
        return next(iter(self._state.members.get(group.id, {})), None)

    def lead(self, job_id: str) -> None:
        entry = self._state.jobs[job_id]
        self._state.move(entry, JobState.PENDING, EventKind.FLUSHED, self._now,
                         message="its group is due: it leads the group's run")
        self.sent += 1
