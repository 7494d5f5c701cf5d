"""What a search reads of a job (``Inspector.job_heads``): bounded whatever the job holds."""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.core.job import JobState

#: Characters of a job's payload text and of its message that a search reads
#: (``Inspector.job_heads``): enough for ids, names and short values, whatever the job holds.
HEAD_CHARS = 2048


@dataclass(frozen=True, slots=True)
class JobHead:
    """What a search reads of a job (``Inspector.job_heads``): its identity and state, and the
    first ``HEAD_CHARS`` characters of its payload text (``{"a": args, "k": kwargs, ...}``
    as stored) and of its last message. Bounded whatever the job holds."""

    id: str
    name: str
    queue: str
    state: JobState | None  # None: a damaged record whose state cannot be read
    created_at: float
    payload: str
    message: str
