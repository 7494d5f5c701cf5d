"""The memory backend's outcome counters: all time per (queue, job name), and per queue and
minute for the last day (what ``Inspector.job_totals`` and ``Inspector.history`` report)."""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.core.job import JobRecord, JobState
from conveyor.storage.totals import history_start, minute_of


@dataclass(slots=True)
class Counts:
    """All-time outcome counters of one (queue, job name)."""

    processed: int = 0
    failed: int = 0
    dead: int = 0
    retried: int = 0


class Totals:
    """Every outcome counted as its move is made (the caller holds the store's lock)."""

    def __init__(self) -> None:
        self.by_name: dict[tuple[str, str], Counts] = {}
        # (queue, minute) -> [processed, failed, dead, retried], the last day
        self.minutes: dict[tuple[str, int], list[int]] = {}

    def moved(self, rec: JobRecord, new: JobState, now: float) -> None:
        """Count a job's move into ``new`` when it is an outcome."""
        if new is JobState.SUCCEEDED:
            self._of(rec).processed += 1
            self._minute(rec.queue, now, 0)
        elif new in (JobState.FAILED, JobState.DEAD):
            counts = self._of(rec)
            if new is JobState.FAILED:
                counts.failed += 1
            else:
                counts.dead += 1
            self._minute(rec.queue, now, 1 if new is JobState.FAILED else 2)

    def retried(self, rec: JobRecord, now: float) -> None:
        """Count an error that will run again."""
        self._of(rec).retried += 1
        self._minute(rec.queue, now, 3)

    def trim(self, now: float) -> None:
        """Forget the minutes older than a day."""
        start = history_start(now)
        self.minutes = {k: v for k, v in self.minutes.items() if k[1] >= start}

    def _minute(self, queue: str, now: float, column: int) -> None:
        """Add one outcome (its ``MinuteTotals`` column: processed, failed, dead, retried)."""
        row = self.minutes.setdefault((queue, minute_of(now)), [0, 0, 0, 0])
        row[column] += 1

    def _of(self, rec: JobRecord) -> Counts:
        key = (rec.queue, rec.name)
        counts = self.by_name.get(key)
        if counts is None:
            counts = self.by_name[key] = Counts()
        return counts
