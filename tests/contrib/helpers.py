"""What the contrib tests read back from the job storage."""

from __future__ import annotations

from conveyor import Conveyor, JobState


def stored(app: Conveyor) -> list[tuple[str, list[object], dict[str, object]]]:
    """(queue, args, kwargs) of every stored pending job, oldest first."""
    return [(r.queue, r.args, r.kwargs)
            for r in app.storage.list_jobs(state=JobState.PENDING, limit=100)]
