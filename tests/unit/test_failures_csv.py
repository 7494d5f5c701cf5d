"""The failures export as a spreadsheet reads it (issues 49 and 51).

Expectation from OWASP's CSV-injection guidance (and what Sidekiq-era export tools do): a cell
a spreadsheet would run as a formula is prefixed with ``'``. Spreadsheets skip leading blanks
and invisible characters and read full-width signs as formulas, so those count too. Times are
ISO 8601 in UTC, as every spreadsheet and JSON reader takes them (an epoch float is a number).
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from conveyor.core.job import JobRecord, JobState
from conveyor.views.failures import failures, failures_csv, failures_json, iso_time


def _exported(message: str, finished_at: float | None = 1_795_884_078.25) -> dict[str, str]:
    record = JobRecord(id="j1", name="shop.row", queue="rows", payload='{"a":[1],"k":{}}',
                       state=JobState.FAILED, message=message, finished_at=finished_at)
    [row] = csv.DictReader(io.StringIO("".join(failures_csv([record]))))
    return row


@pytest.mark.parametrize("reason", [
    "=1+1", "+1", "-1", "@SUM(A1)", "\t=1", "\r=1",  # the first round's
    " =1", "\n=1", "\u00a0=1", "\u200b=1", "\ufeff=1", "\u3000=1",  # blanks and invisibles
    "\uff1dHYPERLINK(\"http://evil.example\")", "\uff0b1", "\uff0d1", "\uff20SUM(A1)",
    " \u200b \n\uff1d1",
])
def test_a_cell_a_spreadsheet_would_run_is_quoted(reason: str) -> None:
    assert _exported(reason)["reason"] == "'" + reason


@pytest.mark.parametrize("reason", ["bad SKU", " bad SKU", "", "1=1", "a-b", "\u200bword"])
def test_other_cells_are_left_alone(reason: str) -> None:
    assert _exported(reason)["reason"] == reason


def test_finished_at_is_iso_8601_utc() -> None:
    assert _exported("x")["finished_at"] == "2026-11-28T16:41:18.250Z"
    assert _exported("x", None)["finished_at"] == ""
    record = JobRecord(id="j1", name="n", queue="q", payload="{}", state=JobState.DEAD,
                       finished_at=0.0)
    assert json.loads("".join(failures_json([record])))[0]["finished_at"] == (
        "1970-01-01T00:00:00.000Z")
    assert iso_time(None) is None


class _Pages:
    """A batch of failed jobs of ``size`` characters each, recording every page asked for."""

    def __init__(self, jobs: int, size: int) -> None:
        self.records = [JobRecord(id=f"j{n}", name="n", queue="q", payload="x" * size,
                                  state=JobState.FAILED) for n in range(jobs)]
        self.limits: list[int] = []

    def get_batch(self, batch_id: str) -> object:
        return object()

    def list_jobs(self, *, state: JobState, batch_id: str, offset: int, limit: int
                  ) -> list[JobRecord]:
        self.limits.append(limit)
        return self.records[offset:offset + limit] if state is JobState.FAILED else []


def test_a_sized_read_keeps_pages_of_big_jobs_small_and_of_small_jobs_large() -> None:
    """The dashboard's export reads about ``page_bytes`` at a time: a page of 100 KB jobs is a
    handful of jobs, a page of small ones up to 500 (few pages: each costs its offset)."""
    big = _Pages(100, 100_000)
    assert len(list(failures(big, "b", page_bytes=1_000_000))) == 100  # type: ignore[arg-type]
    assert big.limits[0] == 20 and set(big.limits[1:4]) == {10}
    small = _Pages(2000, 30)
    assert len(list(failures(small, "b", page_bytes=1_000_000))) == 2000  # type: ignore[arg-type]
    assert small.limits[:2] == [20, 500]
    plain = _Pages(600, 30)
    assert len(list(failures(plain, "b"))) == 600  # type: ignore[arg-type]
    assert plain.limits[:2] == [500, 500]
