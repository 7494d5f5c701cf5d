"""Aggregation group rows on SQLite (``agg_groups``): read, write, and members joining
within one transaction. Apart from ``groups.py`` so that ``jobs.insert`` can join members
without importing the steps that move jobs."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from conveyor.storage import aggregation
from conveyor.storage.aggregation import Arrival, Group, GroupId

__all__ = ["GROUP", "Joiner", "group_row", "load", "save"]

GROUP = ("queue, name, key, first_at, last_at, size, flush_at, lead, grace, max_delay, "
         "max_size")
_SAVE = f"INSERT OR REPLACE INTO agg_groups ({GROUP}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


class Joiner:
    """Members joining their groups within one transaction (groups read on first touch,
    written by ``save``)."""

    def __init__(self, cur: sqlite3.Cursor, now: float) -> None:
        self._cur = cur
        self._now = now
        self._groups: dict[GroupId, Group] = {}
        self._read: set[GroupId] = set()

    def leads(self, member: Arrival) -> bool:
        """Join ``member``; True when it is stored pending, as its group's lead."""
        gid = member.group
        if gid not in self._read:
            self._read.add(gid)
            found = load(self._cur, gid)
            if found is not None:
                self._groups[gid] = found
        return bool(aggregation.join(self._groups, [member], self._now))

    def write(self) -> None:
        """Write every group touched."""
        save(self._cur, self._groups.values())


def load(cur: sqlite3.Cursor, gid: GroupId) -> Group | None:
    """The stored group, or None."""
    row = cur.execute(f"SELECT {GROUP} FROM agg_groups WHERE queue = ? AND name = ? AND key = ?",
                      gid).fetchone()
    return None if row is None else group_row(row)


def group_row(row: Sequence[Any]) -> Group:
    """A ``Group`` from a row selected as ``GROUP``."""
    return Group(row[0], row[1], row[2], float(row[3]), float(row[4]), int(row[5]),
                 float(row[6]), row[7], float(row[8]), float(row[9]), int(row[10]))


def save(cur: sqlite3.Cursor, groups: Iterable[Group]) -> None:
    """Write groups (replacing their rows)."""
    cur.executemany(_SAVE, [(g.queue, g.name, g.key, g.first_at, g.last_at, g.size, g.flush_at,
                             g.lead, g.grace, g.max_delay, g.max_size) for g in groups])
