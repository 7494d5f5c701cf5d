"""Blobs no job references any more, collected (docs/job-data.md, "Clean-up").

One rule covers every way a blob is left behind: the job was trimmed by retention, deleted by
hand or with its batch or workflow; an enqueue wrote the blob and then failed (the process
died, the store refused, a unique job existed already); a worker wrote a result and its ack
never landed (the job ran again and wrote another). A blob's key starts with the id of its
job, so ``sweep`` reads that job and deletes each of the job's blobs its stored payload and
result do not name — once the blob is older than the offload's ``grace``, so an enqueue or
an ack still in flight keeps its blob. Nothing else deletes blobs; the store needs no hook.

A node's arguments may hold a parent's result by reference (a fan-in): that blob belongs to
the parent and lives as long as the parent job is stored.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from itertools import islice
from typing import Any

from conveyor.client.payloads import JobData
from conveyor.core.envelope import RESULT_TAG
from conveyor.core.job import JobRecord

__all__ = ["referenced", "sweep"]

#: Blobs weighed per sweep at most (the next sweep goes on with the rest).
SWEEP_LIMIT = 20_000
#: A blob's key as ``JobData`` makes it (``<job id>.<p|r>.<12 hex>``), or the temporary file
#: a directory store writes it through (``.tmp-<8 hex>`` after it); group 1 is the job id.
KEY = re.compile(r"([A-Za-z0-9_.:-]{1,128})\.[pr]\.[0-9a-f]{12}(?:\.tmp-[0-9a-f]{8})?")


def referenced(record: JobRecord) -> set[str]:
    """The blob keys a stored job's payload and result name."""
    found: set[str] = set()
    for text, pick in ((record.payload, _payload_ref), (record.result, _result_ref)):
        if text and '"r":' in text:
            try:
                key = pick(json.loads(text))
            except (ValueError, RecursionError, AttributeError, TypeError):
                continue
            if isinstance(key, str):
                found.add(key)
    return found


def _payload_ref(stored: Any) -> Any:
    env = stored.get("x")
    return env.get("r") if isinstance(env, dict) else None


def _result_ref(stored: Any) -> Any:
    env = stored.get(RESULT_TAG) if isinstance(stored, dict) else None
    return env.get("r") if isinstance(env, dict) else None


def sweep(data: JobData, get_job: Callable[[str], JobRecord | None],
          now: float | None = None, limit: int = SWEEP_LIMIT) -> int:
    """Delete the blobs older than the grace that their job does not reference (or whose job
    is gone); returns how many. ``get_job`` reads a stored job (``Inspector.get_job``)."""
    if data.offload is None:
        return 0
    store = data.blobs()
    before = (time.time() if now is None else now) - data.offload.grace
    by_job: dict[str, list[str]] = {}
    for key in islice(store.listing(before), limit):
        found = KEY.fullmatch(key)
        if found is not None:  # anything else in the store is not conveyor's to delete
            by_job.setdefault(found.group(1), []).append(key)
    doomed: list[str] = []
    for job_id, keys in by_job.items():
        record = get_job(job_id)
        keep = referenced(record) if record is not None else set()
        doomed += [k for k in keys if k not in keep]
    store.delete(doomed)
    return len(doomed)
