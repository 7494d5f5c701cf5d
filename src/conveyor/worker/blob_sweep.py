"""Blobs no job references any more, collected (docs/job-data.md, "Clean-up").

One rule covers every way a blob is left behind: the job was trimmed by retention, deleted by
hand or with its batch or workflow; an enqueue wrote the blob and then failed (the process
died, the store refused, a unique job existed already); a worker wrote a result and its ack
never landed (the job ran again and wrote another). A blob's key starts with the id of its
job, so ``sweep`` reads that job and deletes each of the job's blobs its stored payload and
result do not name (nor, for a durable job's step results, its step records: docs/durable.md)
— once the blob is older than the offload's ``grace``, so an enqueue or an ack still in
flight keeps its blob. Nothing else deletes blobs; the store needs no hook.

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
from conveyor.core.steps import DurableHistory

__all__ = ["referenced", "sweep"]

#: Blobs weighed per sweep at most (the next sweep goes on with the rest).
SWEEP_LIMIT = 20_000
#: A blob's key as ``JobData`` makes it (``<job id>.<p|r|s>.<12 hex>``: arguments, result,
#: a step's result), or the temporary file a directory store writes it through
#: (``.tmp-<8 hex>`` after it); group 1 is the job id, group 2 the kind.
KEY = re.compile(r"([A-Za-z0-9_.:-]{1,128})\.([prs])\.[0-9a-f]{12}(?:\.tmp-[0-9a-f]{8})?")


def referenced(record: JobRecord, history: DurableHistory | None = None) -> set[str]:
    """The blob keys a stored job's payload and result name, and its step records'
    results (``history``: its durable records)."""
    found: set[str] = set()
    texts = [(record.payload, _payload_ref), (record.result, _result_ref)]
    texts += [(s.result, _result_ref) for s in (history.steps if history else ())]
    for text, pick in texts:
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
          now: float | None = None, limit: int = SWEEP_LIMIT, *,
          steps: Callable[[str], DurableHistory] | None = None) -> int:
    """Delete the blobs older than the grace that their job does not reference (or whose job
    is gone); returns how many. ``get_job`` reads a stored job (``Inspector.get_job``),
    ``steps`` its durable records (``Storage.durable.read``), read only for a job that has a
    step's blob; without it a step's blob is never deleted (it cannot be weighed)."""
    if data.offload is None:
        return 0
    store = data.blobs()
    before = (time.time() if now is None else now) - data.offload.grace
    by_job: dict[str, list[str]] = {}
    stepped: set[str] = set()
    for key in islice(store.listing(before), limit):
        found = KEY.fullmatch(key)
        if found is None or (found.group(2) == "s" and steps is None):
            continue  # anything else in the store is not conveyor's to delete
        by_job.setdefault(found.group(1), []).append(key)
        if found.group(2) == "s":
            stepped.add(found.group(1))
    doomed: list[str] = []
    for job_id, keys in by_job.items():
        record = get_job(job_id)
        history = steps(job_id) if steps is not None and job_id in stepped else None
        keep = referenced(record, history) if record is not None else set()
        doomed += [k for k in keys if k not in keep]
    store.delete(doomed)
    return len(doomed)
