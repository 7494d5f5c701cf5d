"""A batch's failures, for the operator's next click (dashboard and CLI): retry its failed
or dead jobs, and export them as CSV or JSON (job id, name, state, arguments, reason,
attempts, errors, when it ended, in ISO 8601 UTC).

Every read is a page of ``Inspector.list_jobs(state=..., batch_id=...)``, which each store
serves from its batch index (bounded, never a scan of other batches' jobs); a retry takes
the jobs page by page (retried jobs leave the state, so the next page is the next jobs).
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import Any

from conveyor.errors import BatchNotFound
from conveyor.job import JobRecord, JobState
from conveyor.storage.base import Inspector

__all__ = [
    "COLUMNS",
    "FAILURE_STATES",
    "check_batch",
    "failure_states",
    "failures",
    "failures_csv",
    "failures_json",
    "iso_time",
    "retry_failures",
]

FAILURE_STATES = (JobState.FAILED, JobState.DEAD)
COLUMNS = ("id", "name", "state", "args", "kwargs", "reason", "attempts", "errors",
           "finished_at")
PAGE = 500
FIRST_PAGE = 20  # the first page of a sized read (``failures(page_bytes=)``)
# Spreadsheets run a cell that starts with one of these as a formula (CSV injection), also
# after blanks and invisible characters they skip (a space, a newline, U+00A0, U+200B) and in
# their full-width forms (U+FF1D "＝"), which some read as the ASCII sign.
_FORMULA = frozenset("=+-@")
_SKIPPED = frozenset(("Zs", "Zl", "Zp", "Cc", "Cf"))


def failure_states(which: str) -> tuple[JobState, ...]:
    """``failed``, ``dead`` or ``all`` (both) as states; ``ValueError`` for anything else."""
    if which == "all":
        return FAILURE_STATES
    if which in ("failed", "dead"):
        return (JobState(which),)
    raise ValueError(f"which failures: failed, dead or all, not {which!r}")


def check_batch(insp: Inspector, batch_id: str) -> None:
    """``BatchNotFound`` unless ``batch_id`` is stored."""
    if insp.get_batch(batch_id) is None:
        raise BatchNotFound(f"batch {batch_id} does not exist (or was trimmed)")


def failures(insp: Inspector, batch_id: str,
             states: Iterable[JobState] = FAILURE_STATES, page_bytes: int | None = None
             ) -> Iterator[JobRecord]:
    """The batch's jobs in ``states``, a page at a time, oldest first within each state.

    Pages are of ``PAGE`` jobs; with ``page_bytes``, of about that many bytes of arguments
    and messages instead (from ``FIRST_PAGE`` jobs on, sized by the jobs read so far, at most
    ``PAGE``): a page of big jobs stays small, and small jobs still come in few pages."""
    check_batch(insp, batch_id)
    size = PAGE if page_bytes is None else FIRST_PAGE
    for state in states:
        offset = 0
        while True:
            records = insp.list_jobs(state=state, batch_id=batch_id, offset=offset, limit=size)
            yield from records
            if len(records) < size:
                break
            offset += size
            if page_bytes is not None:
                each = sum(len(r.payload) + len(r.message or "") for r in records) / size
                size = max(1, min(PAGE, int(page_bytes // max(each, 1.0))))


def retry_failures(insp: Inspector, batch_id: str,
                   states: Iterable[JobState] = FAILURE_STATES) -> int:
    """Retry every job of the batch in ``states``; returns how many were retried."""
    check_batch(insp, batch_id)
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
            "finished_at": iso_time(record.finished_at)}


def iso_time(ts: float | None) -> str | None:
    """A storage timestamp as ISO 8601 in UTC (``2026-11-27T09:00:00.250Z``), what a
    spreadsheet or a JSON reader takes as a time; None stays None."""
    if ts is None:
        return None
    moment = datetime.fromtimestamp(ts, timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _formula(text: str) -> bool:
    """Whether a spreadsheet could run ``text`` as a formula."""
    for char in text:
        if char in "\t\r":
            return True
        if unicodedata.category(char) not in _SKIPPED:
            return unicodedata.normalize("NFKC", char) in _FORMULA
    return False


def _cell(value: Any) -> str:
    text = "" if value is None else (value if isinstance(value, str) else
                                     json.dumps(value, ensure_ascii=False, default=str))
    return "'" + text if _formula(text) else text


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
