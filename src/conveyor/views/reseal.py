"""Stored jobs sealed again with the newest key (``conveyor jobs reencrypt``; docs/job-data.md,
"Encryption at rest"): after a rotation, so that an old key can be dropped.

Each job's arguments, result and last message sealed with an older key are opened and sealed
with the newest (data by reference is written to a new blob; the old one is collected by the
janitor's sweep), then written back with ``Inspector.reseal``, a compare-and-set: a job that
moved meanwhile (it ran, it was retried) keeps what it has and is counted as changed; run the
command again for it. Log lines and error details in the event log keep the key they were
written with.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor.client.payloads import JobData
from conveyor.core.envelope import RESULT_TAG, parse_result
from conveyor.core.job import JobRecord, JobState
from conveyor.storage.base import Inspector
from conveyor.storage.stored_data import StoredData

__all__ = ["Resealed", "reseal_jobs", "resealed"]

_PAGE = 500


@dataclass(slots=True)
class Resealed:
    """What a pass did: jobs read, sealed again, changed meanwhile (left), unreadable here."""

    read: int = 0
    resealed: int = 0
    changed: int = 0
    failed: int = 0


def resealed(data: JobData, record: JobRecord) -> StoredData | None:
    """The job's stored data sealed again with the current key, or None when nothing of it
    is sealed with an older one. Raises ``UnsealError`` (a key not held) or a blob error."""
    payload, result = record.payload, record.result
    changed = False
    if '"x":' in payload:
        stored = json.loads(payload)
        env = stored.get("x") if isinstance(stored, dict) else None
        if isinstance(env, dict):
            bound = record.name if env.get("b") == "n" else f"{record.name}\0{record.id}"
            fresh = data.reseal_env(env, "payload", bound, record.id)
            if fresh is not None:
                stored["x"], changed = fresh, True
                payload = json.dumps(stored, separators=(",", ":"))
    if result and result.startswith('{"' + RESULT_TAG):
        _, env = parse_result(result)
        if env is not None:
            fresh = data.reseal_env(env, "result", str(env.get("j", record.id)), record.id)
            if fresh is not None:
                result, changed = json.dumps({RESULT_TAG: fresh}, separators=(",", ":")), True
    message = data.reseal_text(record.message)
    changed = changed or message != record.message
    return StoredData(payload, result, message) if changed else None


def reseal_jobs(insp: Inspector, data: JobData, *, state: JobState | None = None,
                queue: str | None = None, limit: int | None = None,
                progress: Callable[[Resealed], Any] | None = None) -> Resealed:
    """Seal again every stored job (of ``state``, ``queue``) whose data an older key sealed."""
    done = Resealed()
    offset = 0
    while limit is None or done.read < limit:
        page = insp.list_jobs(state=state, queue=queue, offset=offset, limit=_PAGE)
        offset += len(page)
        for record in page:
            done.read += 1
            try:
                new = resealed(data, record)
            except Exception:  # a key not held, a blob gone: the job keeps its data
                done.failed += 1
                continue
            if new is None:
                continue
            old = StoredData(record.payload, record.result, record.message)
            if insp.reseal(record.id, old, new):
                done.resealed += 1
            else:
                done.changed += 1
        if progress is not None:
            progress(done)
        if len(page) < _PAGE:
            break
    return done
