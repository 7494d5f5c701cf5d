"""The Periodic pages change schedules at run time: add, edit, pause, reset and remove, each a
CSRF-checked POST recorded in the audit trail with the dashboard's client, and shown there.

Expectations from the peers: Oban Web's cron page (DynamicCron entries edited, paused and
deleted from the dashboard) and BullMQ's job schedulers managed from Taskforce/Bull Board.
"""

from __future__ import annotations

import html
import json
import re
from urllib.parse import urlencode

from tests.web.conftest import Site


def _history(site: Site, name: str) -> list[dict[str, object]]:
    reply = site.client().get(f"/api/periodic/history?{urlencode({'schedule': name})}")
    assert reply.status == 200
    return list(json.loads(reply.body))


def test_a_schedule_added_edited_paused_and_removed_from_the_page(site: Site) -> None:
    client = site.client()
    csrf = client.csrf()
    page = client.get("/periodic").body
    assert "Add a schedule" in page and 'value="add-schedule"' in page
    form = {"op": "add-schedule", "schedule": "digest <b>", "cron": "*/15 * * * *",
            "job": "shop.register", "args": '["ada"]', "next": "/periodic"}
    assert client.post("/action", form).status == 403  # no CSRF field: nothing stored
    assert all(s.name != "digest <b>" for s in site.app.storage.schedules())
    reply = client.post("/action", {**form, "csrf": csrf})
    assert reply.status == 303 and reply.headers["location"] == "/periodic"
    [added] = [s for s in site.app.storage.schedules() if s.name == "digest <b>"]
    assert (added.origin, added.cron, added.args, added.tz, added.queue) == (
        "runtime", "*/15 * * * *", '["ada"]', "UTC", "default")
    listing = client.get("/periodic").body
    assert "digest &lt;b&gt;" in listing and "digest <b>" not in listing  # escaped
    assert 'href="/periodic/digest%20%3Cb%3E"' in listing
    detail = client.get("/periodic/digest%20%3Cb%3E").body
    assert 'value="change-schedule"' in detail and 'value="*/15 * * * *"' in detail
    edit = {"op": "change-schedule", "schedule": "digest <b>", "cron": "0 * * * *",
            "tz": "UTC", "job": "shop.register", "queue": "default", "args": '["ada"]',
            "kwargs": "{}", "csrf": csrf, "next": "/periodic"}
    assert client.post("/action", edit).status == 303
    assert "<td>Paused</td><td>no</td>" in client.get("/periodic/digest%20%3Cb%3E").body
    assert client.post("/action", {"op": "pause-schedule", "schedule": "digest <b>",
                                   "csrf": csrf}).status == 303
    # A schedule is paused or not, as the CLI's PAUSED column says: "running" is a job's
    # word (docs/design.md's glossary), never a schedule's.
    paused = client.get("/periodic/digest%20%3Cb%3E").body
    assert '<td>Paused</td><td><span class="badge s-paused">yes</span></td>' in paused
    assert client.post("/action", {"op": "remove-schedule", "schedule": "digest <b>",
                                   "csrf": csrf}).status == 303
    assert all(s.name != "digest <b>" for s in site.app.storage.schedules())
    history = _history(site, "digest <b>")
    assert [c["action"] for c in history] == ["removed", "paused", "changed", "added"]
    assert {c["by"] for c in history} == {"dashboard 127.0.0.1"}
    assert history[2]["detail"] == "cron '*/15 * * * *' -> '0 * * * *'"
    assert "removed" in client.get("/periodic").body  # the page's recent changes


def test_an_edit_of_a_declared_schedule_shows_the_code_and_resets(site: Site) -> None:
    client = site.client()
    csrf = client.csrf()
    edit = {"op": "change-schedule", "schedule": "nightly-export", "cron": "30 4 * * *",
            "csrf": csrf}
    assert client.post("/action", edit).status == 303
    listing = client.get("/periodic").body
    assert "code, edited" in listing and 'value="reset-schedule"' in listing
    detail = client.get("/periodic/nightly-export").body
    assert "The code declares" in detail and "cron 0 3 * * *" in detail
    assert client.post("/action", {"op": "reset-schedule", "schedule": "nightly-export",
                                   "csrf": csrf}).status == 303
    [info] = [s for s in site.app.storage.schedules() if s.name == "nightly-export"]
    assert (info.cron, info.edited) == ("0 3 * * *", False)
    assert [c["action"] for c in _history(site, "nightly-export")][:2] == ["reset", "changed"]


def test_what_cannot_be_stored_is_refused_in_one_line(site: Site) -> None:
    client = site.client()
    csrf = client.csrf()
    for form, words in (
            ({"op": "add-schedule", "schedule": "x", "cron": "soon", "job": "a"},
             "invalid cron expression"),
            ({"op": "add-schedule", "schedule": "x", "cron": "* * * * *"},
             "a schedule needs its job"),
            ({"op": "add-schedule", "schedule": "x", "cron": "* * * * *", "job": "a",
              "args": "{}"}, "args must be a JSON array"),
            ({"op": "add-schedule", "schedule": "nightly-export", "cron": "* * * * *",
              "job": "a"}, "exists already"),
            ({"op": "change-schedule", "schedule": "nope", "cron": "* * * * *"},
             "no periodic schedule named"),
            ({"op": "reset-schedule", "schedule": "restock-check"}, "no edit to reset")):
        reply = client.post("/action", {**form, "csrf": csrf})
        error = re.findall(r'<p class="error">([^<]*)</p>', reply.body)
        assert reply.status in (400, 404) and len(error) == 1, form
        assert words in html.unescape(error[0]), (form, error)
    assert {s.name for s in site.app.storage.schedules()} == {"nightly-export",
                                                              "restock-check"}
