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

from conveyor.failures import failures_csv, failures_json, iso_time
from conveyor.job import JobRecord, JobState


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
