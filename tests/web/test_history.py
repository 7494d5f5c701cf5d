"""The last day per minute on the overview (issue 26): ``/api/history`` (all queues or one, a
number for every minute) and each queue's outcomes over the last hour and day, from the
seeded store's real acknowledgements (default: one each of succeeded, failed, dead and
retried)."""

from __future__ import annotations

import json
import re

from conveyor.core.job import Outcome
from conveyor.storage.totals import HISTORY_MINUTES
from tests.web.conftest import Site
from tests.web.seed import run_one


def _sums(day: dict[str, object]) -> dict[str, int]:
    series = day["series"]
    assert isinstance(series, dict)
    return {k: sum(v) for k, v in series.items()}


def test_api_history_is_a_number_per_minute_of_the_day(site: Site) -> None:
    for part in range(2):  # the batch's jobs, on the second queue
        run_one(site.app.storage, "exports", Outcome.SUCCEEDED if part else Outcome.FAILED,
                message="no")
    client = site.client()
    day = json.loads(client.get("/api/history").body)
    assert day["minutes"] == HISTORY_MINUTES and day["step"] == 60 and day["queue"] is None
    assert all(len(v) == HISTORY_MINUTES for v in day["series"].values())
    assert day["start"] % 60 == 0 and day["start"] <= day["now"] < day["start"] + 86400
    assert _sums(day) == {"processed": 2, "failed": 2, "dead": 1, "retried": 1}
    one = json.loads(client.get("/api/history?queue=exports&minutes=60").body)
    assert one["queue"] == "exports" and one["minutes"] == 60
    assert _sums(one) == {"processed": 1, "failed": 1, "dead": 0, "retried": 0}
    by_queue = {q["name"]: q for q in day["queues"]}
    assert by_queue["default"]["day"] == by_queue["default"]["hour"] == {
        "processed": 1, "failed": 1, "dead": 1, "retried": 1}
    assert _sums(json.loads(client.get("/api/history?queue=nothing-here").body)) == dict.fromkeys(
        ("processed", "failed", "dead", "retried"), 0)
    for bad in ("abc", "-5", "99999999999999999999"):  # clamped or the default, never a 500
        reply = client.get(f"/api/history?minutes={bad}")
        assert reply.status == 200
        assert json.loads(reply.body)["minutes"] in (1, HISTORY_MINUTES)


def test_the_overview_shows_each_queues_last_hour_and_day(site: Site) -> None:
    page = site.client().get("/").body
    assert 'id="chart-history"' in page and 'data-api="/api/history"' in page
    assert re.findall(r'<option value="([^"]*)"', page) == ["", "default", "exports"]
    table = page[page.index('<table class="recent">'):]
    row = re.search(r"<tr><td><a [^>]*>default</a></td>((?:<td>\d+</td>){8})</tr>", table)
    assert row is not None
    assert re.findall(r"\d+", row[1]) == ["1", "1", "1", "1", "1", "1", "1", "1"]
    assert site.client().get("/?partial=1").body.count('class="recent"') == 1  # stays live
