"""Hostile or damaged input never reaches a header, a redirect, a page's words, or a 500.

Redirects and flash messages (issue #14 item 10), malformed forms, queries and cookies (13),
https-only cookies (11), and damaged job records on the job list and job page (6).
"""

from __future__ import annotations

import http.client
import sqlite3
from pathlib import Path

import pytest

from conveyor import Conveyor, Fail, current_job
from conveyor.testing import drain
from conveyor.web import RunningServer, create_app
from tests.web.conftest import TOKEN, Client, Site, csrf_in


def _raw(site: Site, path: str, **headers: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", site.server.port, timeout=30)
    conn.request("GET", path, headers=headers)
    return conn.getresponse()


def test_crlf_in_next_sets_no_header(site: Site) -> None:
    client = site.client()
    reply = client.post("/action", {"op": "pause", "queue": "q", "csrf": client.csrf(),
                                    "next": "/x\r\nSet-Cookie: evil=1"})
    assert reply.status == 400 and reply.body.count("\n") == 1
    assert "evil" not in client.cookies and "set-cookie: evil" not in str(reply.headers)
    assert not any(q.paused for q in site.app.storage.queues() if q.name == "q")


def test_a_tab_cannot_turn_next_into_another_site(site: Site) -> None:
    client = site.client()
    reply = client.post("/action", {"op": "pause", "queue": "q", "csrf": client.csrf(),
                                    "next": "/\t/evil.example/"})
    assert reply.status == 400 and "location" not in reply.headers


def test_token_login_at_an_odd_path_stays_local(locked_site: Site) -> None:
    reply = _raw(locked_site, f"//evil.example/x?token={TOKEN}")
    assert reply.status == 303 and reply.getheader("location") == "/"


def test_login_form_never_posts_elsewhere(locked_site: Site) -> None:
    for path in ("//evil.example/steal", "/\\evil.example", "/dead"):
        reply = _raw(locked_site, path)
        body = reply.read().decode()
        assert reply.status == 401 and 'name="token"' in body
        assert "action=" not in body and "evil.example" not in body


def test_flash_text_comes_only_from_the_server(site: Site) -> None:
    client = site.client()
    assert "pwned by link" not in client.get("/dead?flash=pwned+by+link").body
    client.cookies["conveyor_flash"] = "cHduZWQ.0000"  # "pwned", badly signed
    assert "pwned" not in client.get("/dead").body


def test_malformed_csrf_query_and_cookie_give_one_line_not_500(site: Site) -> None:
    client = site.client()
    client.get("/")
    reply = client.post("/action", {"op": "pause", "queue": "q", "csrf": "\u00e9\u00e9"})
    assert reply.status == 400 and reply.body.count("\n") == 1
    for query in ("offset=%ff", "state=%00", "queue=a%0d%0ab", "queue=%c3"):
        reply = client.get(f"/jobs?{query}")
        assert reply.status == 400 and reply.body.count("\n") == 1, query
    odd = site.client()
    for cookie in ('conveyor_csrf="\\\\', "conveyor_csrf=\u00e9\u00ff; x", "=; ;;",
                   "conveyor_session=\u00e9", "conveyor_flash=\u00e9.\u00e9"):
        reply = odd.request("GET", "/", headers={"Cookie": cookie})
        assert reply.status == 200, cookie


def test_malformed_authorization_is_401_not_500(locked_site: Site) -> None:
    client = locked_site.client()
    for value in ("Basic !!!", "Basic " + "\u00e9" * 4, "Bearer \u00e9", "Bearer "):
        assert client.get("/api/stats", Authorization=value).status == 401, value
    client.cookies["conveyor_session"] = "\u00e9"
    assert client.get("/api/stats").status == 401


def test_cookies_are_secure_when_served_over_https(site: Site) -> None:
    # uvicorn trusts X-Forwarded-Proto from 127.0.0.1 (a local proxy terminating TLS)
    secure = _raw(site, "/", **{"X-Forwarded-Proto": "https"})
    plain = _raw(site, "/")
    assert all("; Secure" in c for c in secure.headers.get_all("set-cookie") or ["x"])
    assert not any("Secure" in c for c in plain.headers.get_all("set-cookie") or [])


def _damage_memory_record(site: Site, key: str) -> str:
    """Damage a stored record the way a broken store returns it: the storage's own object."""
    job_id = site.seeded.ids[key]
    record = site.app.storage.state.jobs[job_id].rec  # type: ignore[attr-defined]
    record.unreadable = "truncated"
    record.payload = '{"a": [1, "<b>tru'
    record.result = '{"ok": tr'
    record.message = "lone \ud800 surrogate <b>"
    return job_id


@pytest.mark.parametrize("site", ["memory"], indirect=True)
def test_damaged_record_is_listed_shown_and_deletable(site: Site) -> None:
    job_id = _damage_memory_record(site, "succeeded")
    client = site.client()
    listing = client.get("/jobs?state=succeeded")
    assert listing.status == 200 and job_id in listing.body
    assert 'title="truncated">unreadable' in listing.body
    assert "\\ud800" in listing.body and "<b>" not in listing.body
    page = client.get(f"/jobs/{job_id}")
    assert page.status == 200 and "Unreadable record: truncated" in page.body
    assert "&lt;b&gt;tru" in page.body and "\\ud800" in page.body
    assert client.get(f"/api/jobs/{job_id}").status == 200
    reply = client.post("/action", {"op": "delete", "ids": job_id, "next": "/jobs",
                                    "csrf": csrf_in(page.body)})
    assert reply.status == 303 and site.state("succeeded") == "gone"


def test_undecodable_stored_json_is_shown_as_text_on_sqlite(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'd.db'}")
    ref = app.enqueue("shop.deep", [1])
    bad = app.enqueue("shop.truncated", [2])
    assert ref is not None and bad is not None
    app.close()
    with sqlite3.connect(tmp_path / "d.db") as db:  # what a disk fault or a bad writer leaves
        db.execute("UPDATE jobs SET payload = ? WHERE id = ?", ("[" * 100_000, ref.id))
        db.execute("UPDATE jobs SET payload = ?, result = ? WHERE id = ?",
                   ('{"a": [', '{"x', bad.id))
    app = Conveyor(f"sqlite:///{tmp_path / 'd.db'}")
    server = RunningServer(create_app(app), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        listing = client.get("/jobs")
        assert listing.status == 200 and listing.body.count(">unreadable</span>") == 2
        for job_id in (ref.id, bad.id):
            page = client.get(f"/jobs/{job_id}")
            assert page.status == 200 and "Unreadable record: " in page.body
    finally:
        server.stop()
        app.close()


def test_job_that_logged_a_lone_surrogate_has_a_page() -> None:
    app = Conveyor("memory://")

    @app.job(name="odd", retry=0)
    def odd() -> None:
        current_job().log("row 3: \ud800 from json.loads")
        raise Fail("bad \udfff value")

    ref = odd.enqueue()
    assert ref is not None
    drain(app)
    server = RunningServer(create_app(app), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        page = client.get(f"/jobs/{ref.id}")
        # stored by the text rule (conveyor.core.text.storable): the lone surrogate became U+FFFD
        assert page.status == 200 and "row 3: \ufffd from json.loads" in page.body
        assert client.get("/jobs").status == 200
        assert client.get(f"/api/jobs/{ref.id}").status == 200
    finally:
        server.stop()
        app.close()
