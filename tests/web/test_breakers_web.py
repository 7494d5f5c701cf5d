"""The breakers on the dashboard and in the metrics: an "Open breakers" section with a close
button (a CSRF-checked POST, as every state change), and ``conveyor_breaker_open`` /
``conveyor_breaker_trips_total`` per key (docs/operations.md, "Breakers").

Expectations: Sidekiq's and Hatchet's dashboards show what holds work back and let an
operator release it; resilience4j exports its breakers' state and transitions as metrics
(``resilience4j_circuitbreaker_state``)."""

from __future__ import annotations

import json

from conveyor.http.metrics import render_inspector
from tests.cli.test_breakers_cli import open_stripe
from tests.web.conftest import Site
from tests.web.test_metrics import _samples


def test_metrics_say_which_breaker_is_open_and_how_often_it_opened(site: Site) -> None:
    assert "conveyor_breaker_open{" not in render_inspector(site.app.storage)
    open_stripe(site.app.storage)
    samples = _samples(render_inspector(site.app.storage))
    assert samples['conveyor_breaker_open{key="stripe"}'] == 1
    assert samples['conveyor_breaker_trips_total{key="stripe"}'] == 1


def test_the_queues_page_shows_open_breakers_and_closes_one_by_post(site: Site) -> None:
    client = site.client()
    assert "Open breakers" not in client.get("/queues").body
    open_stripe(site.app.storage)
    body = client.get("/queues").body
    assert "<h2>Open breakers</h2>" in body and "stripe" in body
    assert "2 errors within 60s; last: ConnectionError: stripe down" in body
    form = {"op": "close-breaker", "key": "stripe", "next": "/queues"}
    assert client.post("/action", form).status == 403  # no CSRF token: refused
    assert [b.state for b in site.app.storage.breakers()] == ["open"]
    reply = client.post("/action", {**form, "csrf": client.csrf()})
    assert reply.status == 303 and reply.headers["location"].startswith("/queues")
    assert site.app.storage.breakers() == []
    assert "Open breakers" not in client.get("/queues").body
    again = client.post("/action", {**form, "csrf": client.csrf()})  # as "no live worker"
    assert again.status == 400
    assert "breaker &#x27;stripe&#x27; is not open: nothing to close" in again.body


def test_the_api_lists_breakers_as_the_cli_json_does(site: Site) -> None:
    """``/api/breakers``: what a monitor polls (Hatchet's and Sidekiq's dashboards serve their
    state as JSON beside the pages); the rows are ``conveyor breakers --json``'s."""
    client = site.client()
    assert json.loads(client.get("/api/breakers").body) == []
    open_stripe(site.app.storage)
    [row] = json.loads(client.get("/api/breakers").body)
    assert (row["key"], row["state"], row["failures"], row["trips"]) == ("stripe", "open", 2, 1)
    assert row["reason"] == "2 errors within 60s; last: ConnectionError: stripe down"
    assert row["probe_at"] > row["opened_at"]
