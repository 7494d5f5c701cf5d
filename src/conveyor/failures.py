"""A batch's failures, for the operator's next click (dashboard and CLI): retry its failed
or dead jobs, and export them as CSV or JSON (job id, name, state, arguments, reason,
attempts, errors, when it ended).

Every read is a page of ``Inspector.list_jobs(state=..., batch_id=...)``, which each store
serves from its batch index (bounded, never a scan of other batches' jobs); a retry takes
the ids first, then retries them a page per call (``retry_failures``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from conveyor.errors import BatchNotFound
from conveyor.job import JobRecord, JobState
from conveyor.storage.base import Inspector

__all__ = ["COLUMNS", "FAILURE_STATES", "Retried", "failure_states", "failures",
           "failures_csv", "failures_json", "retry_failures"]

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
