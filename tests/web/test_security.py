"""Tokens, CSRF, origin checks and redirects: state changes only through checked POSTs."""

from __future__ import annotations

import json

import pytest

from tests.web.conftest import TOKEN, Client, Site, basic, csrf_in


def _retry_dead(client: Client, site: Site, **extra: str) -> int:
    form: dict[str, str | list[str]] = {"op": "retry", "ids": [site.seeded.ids["dead"]],
                                        "next": "/dead", **extra}
    return client.post("/action", form).status


def test_post_without_csrf_is_refused(site: Site) -> None:
    client = site.client()
    client.get("/")  # has a CSRF cookie, but does not send the field
    assert _retry_dead(client, site) == 403
    assert _retry_dead(client, site, csrf="forged") == 403
    assert site.state("dead") == "dead"


def test_post_with_csrf_retries_and_redirects_back(site: Site) -> None:
    client = site.client()
    token = csrf_in(client.get("/dead").body)
    reply = client.post("/action", {"op": "retry", "ids": [site.seeded.ids["dead"]],
                                    "next": "/dead", "csrf": token})
    assert reply.status == 303 and reply.headers["location"] == "/dead"
    assert site.state("dead") == "pending"
    assert "retried 1 job(s)" in client.get(reply.headers["location"]).body
    assert "retried 1 job(s)" not in client.get("/dead").body  # shown once


@pytest.mark.parametrize(("form", "check"), [
    ({"op": "pause", "queue": "exports"},
     lambda s: {q.name: q.paused for q in s.app.storage.queues()}["exports"]),
    ({"op": "kill", "ids": "SCHEDULED"}, lambda s: s.state("scheduled") == "dead"),
    ({"op": "delete", "ids": "SUCCEEDED"}, lambda s: s.state("succeeded") == "gone"),
    ({"op": "retry-all", "state": "failed"}, lambda s: s.state("failed") == "pending"),
    ({"op": "clear", "state": "dead"}, lambda s: s.state("dead") == "gone"),
    ({"op": "pause-schedule", "schedule": "nightly-export"},
     lambda s: s.app.storage.schedule_pauses() == {"nightly-export": None}),
    ({"op": "cancel-batch", "batch": "BATCH"},
     lambda s: s.app.storage.get_batch(s.seeded.batch_id).cancelled),
])
def test_every_operation(site: Site, form: dict[str, str], check: object) -> None:
    client = site.client()
    values = {k: site.seeded.ids.get(v.lower(), v) if k == "ids" else v for k, v in form.items()}
    if values.get("batch") == "BATCH":
        values["batch"] = site.seeded.batch_id
    reply = client.post("/action", {**values, "csrf": client.csrf()})
    assert reply.status == 303
    assert check(site)  # type: ignore[operator]


def test_schedule_pause_and_resume_round_trip(site: Site) -> None:
    client = site.client()
    csrf = client.csrf()
    form = {"schedule": "restock-check", "csrf": csrf}
    assert client.post("/action", {**form, "op": "pause-schedule"}).status == 303
    assert "Resume" in client.get("/periodic").body
    assert site.app.storage.schedule_pauses() == {"restock-check": None}
    assert client.post("/action", {**form, "op": "resume-schedule"}).status == 303
    [resumed_at] = site.app.storage.schedule_pauses().values()
    assert resumed_at is not None  # noted, so workers do not catch up the paused ticks
    reply = client.post("/action", {"op": "pause-schedule", "schedule": "ghost", "csrf": csrf})
    assert reply.status == 404 and "no periodic schedule named &#x27;ghost&#x27;" in reply.body
    assert client.post("/action", {**form, "op": "pause-schedule", "csrf": "forged"}
                       ).status == 403
    assert site.app.storage.schedule_pauses() == {"restock-check": resumed_at}


def test_worker_commands(site: Site) -> None:
    client = site.client()
    csrf = client.csrf()
    assert client.post("/action", {"op": "quiet", "worker": site.seeded.worker_id,
                                   "csrf": csrf}).status == 303
    reply = client.post("/action", {"op": "stop", "worker": "ghost", "csrf": csrf})
    assert reply.status == 400 and "no live worker" in reply.body


def test_bad_operation_and_clearing_waiting_jobs_are_refused(site: Site) -> None:
    client = site.client()
    csrf = client.csrf()
    assert client.post("/action", {"op": "explode", "csrf": csrf}).status == 400
    reply = client.post("/action", {"op": "clear", "state": "pending", "csrf": csrf})
    assert reply.status == 400 and "only finished jobs" in reply.body
    assert site.app.storage.count_jobs(state=None) == 10


def test_cross_origin_post_is_refused(site: Site) -> None:
    client = site.client()
    csrf = client.csrf()
    reply = client.post("/action", {"op": "retry", "ids": site.seeded.ids["dead"],
                                    "csrf": csrf}, Origin="http://evil.example")
    assert reply.status == 403 and site.state("dead") == "dead"


def test_redirect_target_must_be_local(site: Site) -> None:
    client = site.client()
    for target in ("//evil.example/x", "http://evil.example/", "javascript:alert(1)",
                   "/\\evil.example", "\\\\evil.example",
                   "/ /evil.example", "/x\u00e9"):
        reply = client.post("/action", {"op": "pause", "queue": "q", "next": target,
                                        "csrf": client.csrf()})
        assert reply.status == 303 and reply.headers["location"] == "/", target
    reply = client.post("/action", {"op": "pause", "queue": "q", "csrf": client.csrf(),
                                    "next": "/jobs?state=dead&queue=a%20b"})
    assert reply.headers["location"] == "/jobs?state=dead&queue=a%20b"


def test_token_required_for_pages_api_and_metrics(locked_site: Site) -> None:
    client = locked_site.client()
    page = client.get("/dead")
    assert page.status == 401 and 'name="token"' in page.body
    assert locked_site.seeded.ids["dead"] not in page.body
    assert client.get("/api/stats").status == 401
    assert client.get("/metrics").status == 401
    assert client.get("/dead?token=wrong").status == 401
    assert client.get("/static/style.css").status == 200  # the login page needs it


def test_token_login_sets_a_session_cookie_and_drops_the_token(locked_site: Site) -> None:
    client = locked_site.client()
    reply = client.get(f"/dead?token={TOKEN}&queue=default")
    assert reply.status == 303 and reply.headers["location"] == "/dead?queue=default"
    assert TOKEN not in client.cookies["conveyor_session"]
    assert client.get("/dead").status == 200


def test_bearer_and_basic_auth(locked_site: Site) -> None:
    client = locked_site.client()
    assert client.get("/api/stats", Authorization=f"Bearer {TOKEN}").status == 200
    assert client.get("/api/stats", Authorization="Bearer nope").status == 401
    assert client.get("/", Authorization=basic("ops", TOKEN)).status == 200
    assert client.get("/", Authorization=basic("ops", "nope")).status == 401


def test_bearer_post_needs_no_csrf_but_basic_does(locked_site: Site) -> None:
    client = locked_site.client()
    form: dict[str, str | list[str]] = {"op": "retry", "ids": locked_site.seeded.ids["dead"]}
    assert client.post("/action", form, Authorization=basic("ops", TOKEN)).status == 403
    assert locked_site.state("dead") == "dead"
    reply = client.post("/action", form, Authorization=f"Bearer {TOKEN}",
                        Accept="application/json")
    assert reply.status == 200 and json.loads(reply.body)["message"] == "retried 1 job(s)"
    assert locked_site.state("dead") == "pending"


def test_unauthenticated_post_is_refused(locked_site: Site) -> None:
    client = locked_site.client()
    reply = client.post("/action", {"op": "pause", "queue": "default", "csrf": "x"})
    assert reply.status == 401
    assert not any(q.paused for q in locked_site.app.storage.queues())
