"""One stored job of the memory backend (``Entry``: its record plus what only the storage
sees) and the facts about it every part of the backend reads."""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.core.job import JobRecord, JobState
from conveyor.storage.aggregation import GroupId

#: States a job waits in before it runs (cancelled at once by a cancel request).
WAITING_STATES = frozenset({JobState.SCHEDULED, JobState.PENDING, JobState.RETRYING,
                            JobState.WAITING, JobState.AGGREGATING})
#: States a job waits in until its time (the schedule heap promotes them).
DUE_STATES = (JobState.SCHEDULED, JobState.RETRYING)


@dataclass(slots=True, eq=False)
class Entry:
    """One stored job: its record plus what only the storage sees."""

    rec: JobRecord
    seq: int  # enqueue order, the tie-breaker of "oldest first"
    token: str | None = None
    version: int = 0  # bumped on every move; stale schedule-heap entries are skipped by it
    pending_since: float = 0.0
    band: int = 0  # its priority now: the declared one, raised by aging (storage/lineup.py)
    age_next: float = 0.0  # when aging raises it next (with ``flow.aging``)


def group_of(rec: JobRecord) -> GroupId:
    """The aggregation group a member job belongs to."""
    return (rec.queue, rec.name, rec.flow.group_key if rec.flow and rec.flow.group_key else "")
