"""A queue's lineup: the order its pending jobs start in (docs/scheduling.md).

Jobs without a priority, aging or fair key start in arrival order, each store's fast path as
before. A queue holding any other job is walked here, inside the store's atomic step that
leases (memory's lock, SQLite's ``BEGIN IMMEDIATE``; ``postgres/functions/lineup_pick.sql`` and
``redis/lua/dequeue.lua`` over ``lua/_lineup.lua`` spell the same walk on PostgreSQL and
Redis):

1. **Priority**: the highest priority with a pending job goes first (``priority`` -100..100;
   ``aging`` raises a waiting job's priority by one per ``aging`` seconds, ``age``).
2. **Fair turns** within a priority: the keys with pending jobs there take turns round
   robin, one start per turn, in the byte order of their keys after the last key served (the
   queue's *pointer*); the jobs without a fair key are one more key, ``""``, first in a round.
3. **Arrival** within a key: the order the jobs became pending.
4. **Gates**: a job its deadline, key rule, concurrency, order or rate limit holds back is
   passed over (the next job of its key is tried); the next key's turn comes after it.
5. **Cost**: a job takes ``cost`` of the call's room (the worker's free slots); the first job
   admitted that does not fit ends the walk of the queue, so no later job starts before it
   (it is not starved by cheaper ones); a job costlier than the worker's whole capacity is
   passed over (a larger worker takes it).

The decisions are made here once; a store gives its reads and moves (``LineupTxn``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from conveyor.core.flow_control import PRIORITY_MAX

__all__ = ["KEY_SCAN", "Candidate", "FairKeys", "LineupTxn", "Verdict", "aged", "first_aging",
           "keys_before", "rounds", "walk"]

#: Jobs of one key looked at per turn, when those before are held back by their gates.
KEY_SCAN = 64


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pending job as the walk sees it."""

    id: str
    cost: int = 1


class Verdict:
    """What the store's gates say of a candidate (``LineupTxn.judge``)."""

    START = "start"  # may start now
    HELD = "held"  # a limit holds it back: pass over it, it stays pending
    ENDED = "ended"  # it can never start (deadline, key rule): the store ended it


class FairKeys(Protocol):
    """A queue's fair keys and its pointer: what the turn order (``rounds``) reads."""

    def next_key(self, band: int, after: str | None) -> str | None:
        """The first key in byte order after ``after`` (None: from the start; ``""`` is the
        jobs without a fair key) with a pending job at ``band``."""
        ...

    def pointer(self) -> str | None:
        """The key served last in this queue (None: none yet)."""
        ...


class LineupTxn(FairKeys, Protocol):
    """One queue's pending jobs, read and leased inside the store's atomic step."""

    def top_band(self, below: int | None) -> int | None:
        """The highest priority below ``below`` (None: any) holding a pending job."""
        ...

    def jobs(self, band: int, key: str) -> Iterable[Candidate]:
        """The pending jobs of ``key`` at ``band`` in arrival order (read lazily)."""
        ...

    def judge(self, job: Candidate) -> str:
        """The gates' ``Verdict`` for ``job`` now, counting what this call took; ends a job
        that can never start (``Verdict.ENDED``)."""
        ...

    def take(self, job: Candidate) -> None:
        """Lease ``job`` and count it against its limits for the rest of the call."""
        ...

    def set_pointer(self, key: str) -> None:
        """Remember ``key`` as served last."""
        ...


def rounds(txn: FairKeys, band: int, pointer: str | None) -> Iterator[str]:
    """The keys at ``band`` in turn order: those after ``pointer``, then from the first key
    up to ``pointer`` itself; each once. Read lazily, so a key emptied meanwhile is skipped."""
    key = txn.next_key(band, pointer)
    while key is not None:
        yield key
        key = txn.next_key(band, key)
    if pointer is None:
        return
    key = txn.next_key(band, None)
    while key is not None and key <= pointer:
        yield key
        key = txn.next_key(band, key)


def walk(txn: LineupTxn, room: int, capacity: int = 0) -> int:
    """Lease jobs in lineup order while their cost fits in ``room``; ``capacity``: the most
    a job may cost to be taken at all (0: no bound). Returns the room left."""
    pointer = txn.pointer()
    band = txn.top_band(None)
    served = pointer
    while room > 0 and band is not None:
        took = False
        for key in rounds(txn, band, served):
            job = _first(txn, band, key, capacity)
            if job is None:
                continue
            if job.cost > room:
                band = None  # it waits for room: nothing behind it starts before it
                break
            txn.take(job)
            room -= job.cost
            served, took = key, True
            if room <= 0:
                break
        if band is not None and not took:
            band = txn.top_band(band)
    if served is not None and served != pointer:
        txn.set_pointer(served)
    return room


def _first(txn: LineupTxn, band: int, key: str, capacity: int) -> Candidate | None:
    """The first job of ``key`` at ``band`` its gates let start (a job too costly for this
    worker is passed over, as a held one is)."""
    looked = 0
    for job in txn.jobs(band, key):
        looked += 1
        if looked > KEY_SCAN:
            return None
        if capacity and job.cost > capacity:
            continue
        verdict = txn.judge(job)
        if verdict == Verdict.START:
            return job
    return None


def keys_before(txn: FairKeys, band: int, key: str, shown: int) -> tuple[list[str], int]:
    """The keys whose turn comes before ``key``'s at ``band`` now (the first ``shown`` of
    them) and how many there are: what ``GateFacts.keys_before`` reports."""
    before: list[str] = []
    count = 0
    for other in rounds(txn, band, txn.pointer()):
        if other == key:
            break
        count += 1
        if len(before) < shown:
            before.append(other)
    return before, count


def first_aging(aging: float, run_at: float | None, now: float) -> float | None:
    """When aging first raises a new job's priority: ``aging`` seconds after it is first due
    (None: it does not age)."""
    return max(now, run_at or now) + aging if aging else None


def aged(priority: int, age_next: float, aging: float, now: float) -> tuple[int, float]:
    """A pending job's priority and next aging time after ``now``: one more point per
    ``aging`` seconds since ``age_next`` came, up to ``PRIORITY_MAX``."""
    if aging <= 0 or age_next > now or priority >= PRIORITY_MAX:
        return priority, age_next
    steps = math.floor((now - age_next) / aging) + 1
    return min(PRIORITY_MAX, priority + steps), age_next + steps * aging
