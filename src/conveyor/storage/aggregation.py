"""Aggregation groups, once for every backend that runs Python in its transaction (memory,
SQLite, PostgreSQL; Redis runs the same steps in ``lua/_groups.lua``). docs/aggregation.md.

A job with ``flow.group_key`` is a *member*: instead of ``pending`` it waits
``aggregating`` in the group of (queue, name, key). A group is *due* ``grace`` seconds after
its newest member arrived, ``max_delay`` seconds after its oldest, or at once with
``max_size`` members. Three atomic steps move members:

* **join** (enqueue, and promotion of a due scheduled or retrying member): the member is
  stored ``aggregating`` and the group's times move; the member that fills a run
  (``max_size`` with the members no lead has reserved yet) is stored ``pending`` instead: it
  is a *lead*, and the ``max_size - 1`` oldest are its share.
* **flush** (the poller, so a group is due whether or not anything arrives): a due group's
  oldest member becomes ``pending``, the lead. Nothing else moves.
* **gather** (the worker that leased a lead, fenced by the lead's lease): up to
  ``max_size - 1`` of the group's oldest members become ``active`` under the lead's lease;
  the aggregator runs once with all of them and each is acknowledged on its own.

Any pending member leads: a member recovered or interrupted after a gather, or retried by
hand, runs with whatever its group holds when it is leased. A lead that is lost before it
gathers (cancelled, deleted) does not hold its group: the next flush after ``RECHECK``
seconds finds it gone and sends another.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from conveyor.core.job import FlowControl
from conveyor.core.text import key_fault

__all__ = [
    "RECHECK", "Arrival", "Group", "GroupId", "Rest", "arrival", "due_at", "flush", "gather",
    "join",
]

#: Seconds a flushed lead holds its group before the poller looks whether it still lives.
RECHECK = 60.0

#: (queue, job name, group key)
GroupId = tuple[str, str, str]


@dataclass(slots=True)
class Group:
    """One group's summary, as stored beside its members."""

    queue: str
    name: str
    key: str
    first_at: float  # when its oldest aggregating member arrived
    last_at: float  # when its newest arrived
    # aggregating members no lead out has reserved for its run (each lead reserves its
    # ``max_size - 1`` oldest); counted again by the last lead's gather, so members that
    # left meanwhile (cancelled) make it stale for a while only
    size: int
    flush_at: float
    lead: str | None
    grace: float
    max_delay: float
    max_size: int

    @property
    def id(self) -> GroupId:
        """The group's identity."""
        return (self.queue, self.name, self.key)


class Arrival(NamedTuple):
    """A member joining its group, with the settings it brings."""

    id: str
    queue: str
    name: str
    key: str
    grace: float
    max_delay: float
    max_size: int

    @property
    def group(self) -> GroupId:
        """The group it joins."""
        return (self.queue, self.name, self.key)


class Rest(NamedTuple):
    """What a group holds after a gather: aggregating members (counted up to the group's
    ``max_size``) and the oldest one's arrival."""

    size: int
    first_at: float | None


def arrival(job_id: str, queue: str, name: str, flow: FlowControl | None) -> Arrival | None:
    """The arrival of a job that is a member, or None. A stored aggregation key that breaks
    the key rule (a client that does not check it) makes no member: no store can keep a
    group under it (PostgreSQL's index refused it, and every promotion of the store failed
    with it), so the job runs as a lead of its own, as one whose settings cannot be read."""
    if flow is None or not flow.group_key or key_fault(flow.group_key) is not None:
        return None
    return Arrival(job_id, queue, name, flow.group_key, flow.grace, flow.max_delay,
                   flow.max_size)


def due_at(group: Group, now: float) -> float:
    """When a group without a lead out is due."""
    if group.size >= group.max_size:
        return now
    return min(group.last_at + group.grace, group.first_at + group.max_delay)


def join(groups: dict[GroupId, Group], arrivals: Iterable[Arrival], now: float) -> set[str]:
    """Add members to their groups (``groups`` holds the stored ones and is updated in place
    with every group touched); returns the ids stored ``pending``, as leads."""
    leads: set[str] = set()
    for a in arrivals:
        g = groups.get(a.group)
        if g is None or (g.size == 0 and g.lead is None):
            g = groups[a.group] = Group(a.queue, a.name, a.key, now, now, 0, now, None,
                                        a.grace, a.max_delay, a.max_size)
        g.last_at, g.grace, g.max_delay, g.max_size = now, a.grace, a.max_delay, a.max_size
        if g.size + 1 >= g.max_size:  # with it, a full run: it leads, the oldest reserved
            g.lead, g.flush_at = a.id, now + RECHECK
            g.size += 1 - g.max_size
            leads.add(a.id)
            continue
        g.size += 1
        if g.lead is None:
            g.flush_at = due_at(g, now)
    return leads


class FlushTxn(Protocol):
    """What ``flush`` needs of a backend, inside one transaction."""

    def alive(self, leads: Sequence[str]) -> set[str]:
        """The leads still on their way to a gather (pending, scheduled, retrying, active)."""
        ...

    def oldest(self, group: Group) -> str | None:
        """The group's oldest aggregating member."""
        ...

    def lead(self, job_id: str) -> None:
        """Move an aggregating member to ``pending`` with a ``flushed`` event."""
        ...


def flush(txn: FlushTxn, due: Sequence[Group], now: float) -> tuple[list[Group], list[Group]]:
    """Send a lead for each due group; returns (groups to save, empty groups to drop)."""
    alive = txn.alive([g.lead for g in due if g.lead is not None])
    save: list[Group] = []
    drop: list[Group] = []
    for g in due:
        if g.lead is not None and g.lead in alive:
            g.flush_at = now + RECHECK
            save.append(g)
            continue
        first = txn.oldest(g)
        if first is None:
            drop.append(g)
            continue
        txn.lead(first)
        g.lead, g.size, g.flush_at = first, max(g.size - g.max_size, 0), now + RECHECK
        save.append(g)
    return save, drop


def gather(group: Group, lead: str, rest: Rest, now: float) -> bool:
    """Update ``group`` after its members were taken by ``lead``'s run (``rest``: what is
    left); returns False when the group is empty and has no lead out (drop it). While a
    later lead is out its share stays reserved; the last lead's gather counts again."""
    if rest.first_at is not None:
        group.first_at = rest.first_at
    if group.lead not in (None, lead):
        return True
    group.lead, group.size = None, rest.size
    if rest.size == 0:
        return False
    group.flush_at = due_at(group, now)
    return True
