"""The memory backend's side of a queue's lineup (``storage/lineup.py``): its pending jobs
grouped by priority and fair key, read once per dequeue of a queue that holds a job placed by
the lineup, under the store's lock; and aging, in the poller's promotion step."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from conveyor.core.job import EventKind, JobRecord
from conveyor.storage.lineup import Candidate, Verdict, aged, walk
from conveyor.storage.memory.entry import Entry
from conveyor.storage.memory.flow import FlowGate, ScanBudget
from conveyor.storage.memory.state import MemoryState
from conveyor.storage.rules import DEADLINE_PASSED, broken_key

__all__ = ["MemoryLineup", "MemoryLineups", "band_of", "cost_of", "key_of"]


def key_of(rec: JobRecord) -> str:
    """The job's fair key, ``""`` without one."""
    return (rec.flow.fair_key or "") if rec.flow is not None else ""


def cost_of(rec: JobRecord) -> int:
    """The worker slots the job takes."""
    return rec.flow.cost if rec.flow is not None else 1


def band_of(rec: JobRecord, band: int) -> int:
    """The job's priority now: ``band`` (its stored, aged priority) for a job placed by the
    lineup, 0 for any other."""
    return band if rec.flow is not None and rec.flow.in_lineup else 0


@dataclass
class MemoryLineup:
    """``LineupTxn`` over one queue's pending entries (``(record, band)`` in arrival order)."""

    pending: list[tuple[JobRecord, int]]
    at: float  # the dequeue's now
    flow: FlowGate
    budget: ScanBudget
    pointer_of: Callable[[], str | None]
    point: Callable[[str], None]
    taken: list[str] = field(default_factory=list)
    ended: list[tuple[str, str, str]] = field(default_factory=list)  # id, event kind, message
    _groups: dict[int, dict[str, list[JobRecord]]] = field(default_factory=dict)
    _keys: dict[int, list[str]] = field(default_factory=dict)
    _gone: set[str] = field(default_factory=set)
    _index: dict[str, JobRecord] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rec, band in self.pending:
            self._index[rec.id] = rec
            self._groups.setdefault(band, {}).setdefault(key_of(rec), []).append(rec)
        self._keys = {band: sorted(keys) for band, keys in self._groups.items()}

    def _left(self, band: int, key: str) -> Iterator[JobRecord]:
        return (r for r in self._groups.get(band, {}).get(key, ()) if r.id not in self._gone)

    def top_band(self, below: int | None) -> int | None:
        """The highest band below ``below`` with a job left."""
        for band in sorted(self._groups, reverse=True):
            if (below is None or band < below) and any(
                    next(self._left(band, key), None) is not None for key in self._keys[band]):
                return band
        return None

    def next_key(self, band: int, after: str | None) -> str | None:
        """The first key after ``after`` with a job left at ``band``."""
        keys = self._keys.get(band, [])
        at = 0 if after is None else bisect.bisect_right(keys, after)
        for key in keys[at:]:
            if next(self._left(band, key), None) is not None:
                return key
        return None

    def jobs(self, band: int, key: str) -> Iterator[Candidate]:
        """The jobs left of ``key`` at ``band``, in arrival order."""
        return (Candidate(rec.id, cost_of(rec)) for rec in self._left(band, key))

    def judge(self, job: Candidate) -> str:
        """The gates' verdict; a job past its deadline or with a broken key is ended."""
        rec = self._record(job.id)
        if rec.deadline is not None and self.at > rec.deadline:
            self._end(rec, EventKind.EXPIRED, DEADLINE_PASSED)
            return Verdict.ENDED
        broken = broken_key(rec.flow)
        if broken is not None:
            self._end(rec, EventKind.DEAD, broken)
            return Verdict.ENDED
        return Verdict.START if self.flow.allows(rec, self.at, self.budget) else Verdict.HELD

    def take(self, job: Candidate) -> None:
        """Count the job against its limits and hand it to the caller's lease."""
        rec = self._record(job.id)
        self.flow.reserve(rec, self.budget, self.at)
        self._gone.add(rec.id)
        self.taken.append(rec.id)

    def pointer(self) -> str | None:
        """The key served last."""
        return self.pointer_of()

    def set_pointer(self, key: str) -> None:
        """Remember the key served last."""
        self.point(key)

    def _end(self, rec: JobRecord, kind: str, message: str) -> None:
        self._gone.add(rec.id)
        self.ended.append((rec.id, kind, message))

    def _record(self, job_id: str) -> JobRecord:
        return self._index[job_id]


class MemoryLineups:
    """The lineup steps over ``MemoryState``: a queue's walk, and aging (a part of
    ``MemoryStorage``; the caller holds the state's lock)."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state

    def lineup(self, queue: str, now: float, budget: ScanBudget) -> MemoryLineup:
        """The queue's pending jobs as the walk reads them."""
        state = self.state
        entries = [state.jobs[i] for i in state.pending.get(queue, ())]
        return MemoryLineup([(e.rec, band_of(e.rec, e.band)) for e in entries], now,
                            state.flow, budget, lambda: state.pointers.get(queue),
                            lambda key: state.pointers.__setitem__(queue, key))

    def scan(self, queue: str, now: float, wanted: int, budget: ScanBudget,
             picked: list[Entry], ended: list[tuple[Entry, str, str]]) -> int:
        """A queue no job of which the lineup places: arrival order, each job costing 1;
        returns how many were picked."""
        taken = 0
        jobs, flow = self.state.jobs, self.state.flow
        for job_id in self.state.pending.get(queue, ()):
            if taken >= wanted:
                return taken
            entry = jobs[job_id]
            rec = entry.rec
            if rec.deadline is not None and now > rec.deadline:
                ended.append((entry, EventKind.EXPIRED, DEADLINE_PASSED))
            elif (broken := broken_key(rec.flow)) is not None:
                ended.append((entry, EventKind.DEAD, broken))
            elif flow.allows(rec, now, budget):
                # Over-limit jobs are skipped, not retried: they keep their place and attempts.
                flow.reserve(rec, budget, now)
                picked.append(entry)
                taken += 1
        return taken

    def walk(self, queue: str, now: float, room: int, capacity: int, budget: ScanBudget,
             picked: list[Entry], ended: list[tuple[Entry, str, str]]) -> int:
        """A queue holding jobs placed by its lineup: ``lineup.walk`` over its pending jobs;
        returns the room left."""
        txn = self.lineup(queue, now, budget)
        room = walk(txn, room, capacity)
        jobs = self.state.jobs
        picked.extend(jobs[i] for i in txn.taken)
        ended.extend((jobs[i], kind, message) for i, kind, message in txn.ended)
        return room

    def age(self, now: float) -> None:
        """Raise the priority of pending jobs with ``aging`` whose time came
        (``lineup.aged``), as every store's promotion step does."""
        jobs = self.state.jobs
        for ids in self.state.lined.values():
            for job_id in ids:
                entry = jobs[job_id]
                flow = entry.rec.flow
                if flow is not None and flow.aging > 0:
                    entry.band, entry.age_next = aged(entry.band, entry.age_next, flow.aging,
                                                      now)
