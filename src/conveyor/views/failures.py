"""A batch's failures, for the operator's next click (dashboard and CLI): retry its failed
or dead jobs, and export them as CSV or JSON (job id, name, state, arguments, reason,
attempts, errors, when it ended, in ISO 8601 UTC).

Every read is a page of ``Inspector.list_jobs(state=..., batch_id=...)``, which each store
serves from its batch index (bounded, never a scan of other batches' jobs); a retry takes
the ids first, then retries them a page per call (``retry_failures``).
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from conveyor.core.job import JobRecord, JobState
from conveyor.errors import BatchNotFound
from conveyor.storage.base import Inspector

__all__ = [
    "COLUMNS",
    "FAILURE_STATES",
    "Retried",
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


@dataclass(frozen=True, slots=True)
class Retried:
    """What retrying a batch's failures did: ``count`` jobs retried; ``rewaiting`` nodes of a
    workflow the graph had ended, which wait again for an ancestor retried with them; and the
    nodes whose retry was refused, each with the reason (``Inspector.retry_refusals``)."""

    count: int
    rewaiting: int = 0
    refused: dict[str, str] = field(default_factory=dict)

    def summary(self, which: str, batch_id: str) -> str:
        """One line for the operator."""
        line = f"retried {self.count} {which} job(s) of batch {batch_id}"
        if self.rewaiting:
            line += (f"; {self.rewaiting} node(s) the workflow had ended wait for them again")
        if self.refused:
            first = next(iter(self.refused.values()))
            more = f" (and {len(self.refused) - 1} more)" if len(self.refused) > 1 else ""
            line += f"; {first}{more}"
        return line


def retry_failures(insp: Inspector, batch_id: str,
                   states: Iterable[JobState] = FAILURE_STATES) -> Retried:
    """Retry every job of the batch in ``states``.

    The ids are read first, then retried a page per call: in a workflow a node the graph
    ended is not retried itself (its retry is refused while its parents' outcomes stand) but
    re-opened by the retry of the ancestor that ended it, so retrying every failure retries
    their roots and the rest of the graph waits for them, in whatever order they come."""
    ids = [r.id for r in failures(insp, batch_id, states)]
    count = sum(insp.retry_jobs(ids[i:i + PAGE]) for i in range(0, len(ids), PAGE))
    if count == len(ids):
        return Retried(count)
    refused: dict[str, str] = {}
    for i in range(0, len(ids), PAGE):
        refused.update(insp.retry_refusals(ids[i:i + PAGE]))
    return Retried(count, len(ids) - count - len(refused), refused)


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
