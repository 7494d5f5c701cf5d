"""A batch's failures, for the operator's next click (dashboard and CLI): retry its failed
or dead jobs, and export them as CSV or JSON (job id, name, state, arguments, reason,
attempts, errors, when it ended).

Every read is a page of ``Inspector.list_jobs(state=..., batch_id=...)``, which each store
serves from its batch index (bounded, never a scan of other batches' jobs); a retry takes
the jobs page by page (retried jobs leave the state, so the next page is the next jobs).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from conveyor.errors import BatchNotFound
from conveyor.job import JobRecord, JobState
from conveyor.storage.base import Inspector

__all__ = ["COLUMNS", "FAILURE_STATES", "failure_states", "failures", "failures_csv",
           "failures_json", "retry_failures"]

FAILURE_STATES = (JobState.FAILED, JobState.DEAD)
COLUMNS = ("id", "name", "state", "args", "kwargs", "reason", "attempts", "errors",
           "finished_at")
PAGE = 500
# Spreadsheets run a cell that starts with one of these as a formula (CSV injection).
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def failure_states(which: str) -> tuple[JobState, ...]:
    """``failed``, ``dead`` or ``all`` (both) as states; ``ValueError`` for anything else."""
    if which == "all":
        return FAILURE_STATES
    if which in ("failed", "dead"):
        return (JobState(which),)
    raise ValueError(f"which failures: failed, dead or all, not {which!r}")


def _batch(insp: Inspector, batch_id: str) -> None:
    if insp.get_batch(batch_id) is None:
        raise BatchNotFound(f"batch {batch_id} does not exist (or was trimmed)")


def failures(insp: Inspector, batch_id: str,
             states: Iterable[JobState] = FAILURE_STATES) -> Iterator[JobRecord]:
    """The batch's jobs in ``states``, page by page, oldest first within each state."""
    _batch(insp, batch_id)
    for state in states:
        offset = 0
        while True:
            page = insp.list_jobs(state=state, batch_id=batch_id, offset=offset, limit=PAGE)
            yield from page
            if len(page) < PAGE:
                break
            offset += PAGE


def retry_failures(insp: Inspector, batch_id: str,
                   states: Iterable[JobState] = FAILURE_STATES) -> int:
    """Retry every job of the batch in ``states``; returns how many were retried."""
    _batch(insp, batch_id)
    done = 0
    for state in states:
        while True:
            ids = [r.id for r in insp.list_jobs(state=state, batch_id=batch_id, limit=PAGE)]
            retried = insp.retry_jobs(ids) if ids else 0
            done += retried
            if len(ids) < PAGE or retried == 0:  # the last page, or nothing would move
                break
    return done


def row(record: JobRecord) -> dict[str, Any]:
    """One failure as a row of ``COLUMNS``."""
    return {"id": record.id, "name": record.name, "state": record.state.value,
            "args": record.args, "kwargs": record.kwargs, "reason": record.message,
            "attempts": record.attempt, "errors": record.errors,
            "finished_at": record.finished_at}


def _cell(value: Any) -> str:
    text = "" if value is None else (value if isinstance(value, str) else
                                     json.dumps(value, ensure_ascii=False, default=str))
    return "'" + text if text.startswith(_FORMULA) else text


def failures_csv(records: Iterable[JobRecord]) -> Iterator[str]:
    """CSV text, a header then one line per failure (arguments as JSON; a cell that a
    spreadsheet would run as a formula is quoted with a leading ')."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    for record in records:
        values = row(record)
        writer.writerow([_cell(values[c]) for c in COLUMNS])
        yield out.getvalue()
        out.seek(0)
        out.truncate()
    yield out.getvalue()


def failures_json(records: Iterable[JobRecord]) -> Iterator[str]:
    """A JSON array of failures, one object (``COLUMNS``) per line."""
    yield "["
    first = True
    for record in records:
        yield ("\n" if first else ",\n") + json.dumps(row(record), ensure_ascii=False,
                                                      default=str)
        first = False
    yield "\n]\n"
