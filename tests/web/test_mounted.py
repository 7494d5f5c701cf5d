"""The dashboard mounted under a path prefix inside another ASGI app (issue 26): FastAPI's
``mount`` and ``conveyor.web.mount_at`` (for hosts with no router, as Django's ASGI app):
links, assets, redirects and cookies under the prefix, the token working through the host,
or each request authorized by the host's own check (issue 49)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.testclient import TestClient

from conveyor import Conveyor, JobState
from conveyor.web import create_app, mount_at
from tests.web.conftest import csrf_in

TOKEN = "a-token-of-32-characters-or-more!"
ROOT = Path(__file__).resolve().parents[2]


def _local_urls(html: str) -> set[str]:
    return set(re.findall(r'(?:href|src|action)="(/[^"]*)"', html))


def test_under_fastapi_with_the_dashboards_own_token(jobs: Conveyor) -> None:
    api = FastAPI()

    @api.get("/")
    def home() -> dict[str, str]:
        return {"app": "shop"}

    api.mount("/jobs", create_app(jobs, token=TOKEN))
    client = TestClient(api, base_url="http://127.0.0.1", follow_redirects=False)
    assert client.get("/").json() == {"app": "shop"}
    assert client.get("/jobs/queues").status_code == 401  # the sign-in page
    assert "conveyor_session" not in client.cookies
    signed = client.get("/jobs/dead", params={"token": TOKEN})
    assert signed.status_code == 303 and signed.headers["location"] == "/jobs/dead"
    assert "Path=/jobs;" in signed.headers["set-cookie"]
    page = client.get("/jobs/dead")
    assert page.status_code == 200
    assert all(u.startswith("/jobs/") for u in _local_urls(page.text)), _local_urls(page.text)
    assert "Path=/jobs;" in page.headers["set-cookie"]  # the CSRF cookie, under the prefix
    assert client.get("/jobs/static/app.js").status_code == 200
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    dead = jobs.storage.list_jobs(state=JobState.DEAD)[0].id
    done = client.post("/jobs/action", data={"op": "retry", "ids": dead, "next": "/dead",
                                             "csrf": csrf.group(1)})
    assert done.status_code == 303 and done.headers["location"] == "/jobs/dead"
    assert jobs.storage.get_job(dead).state.value == "pending"  # type: ignore[union-attr]


def test_delegate_auth_is_refused_with_the_way_to_authorize(jobs: Conveyor) -> None:
    """Issue 49: ``delegate_auth=True`` served an open dashboard, since a host's dependencies
    and middleware never see a mounted app's requests; it now says what to pass instead."""
    with pytest.raises(ValueError, match=r"authorize=") as refused:
        create_app(jobs, delegate_auth=True)
    assert "\n" not in str(refused.value)
    with pytest.raises(TypeError, match="authorize= takes a callable"):
        create_app(jobs, authorize=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="either a token or authorize="):
        create_app(jobs, token=TOKEN, authorize=lambda scope: True)


# The host application's own sign-in: a session cookie it issued (what its routes check).
SESSIONS = {"s-ada": "ada", "s-bob": "bob"}
STAFF = {"ada"}


def current_user(request: Request) -> str:
    """The host's FastAPI dependency: the signed-in user, else 401."""
    user = SESSIONS.get(request.cookies.get("shop_session", ""))
    if user is None:
        raise HTTPException(401, "sign in first")
    return user


def staff_only(scope: Any) -> bool:
    """The dashboard's check, reusing the host's: a signed-in member of staff. Like a Sidekiq
    route constraint (``constraints lambda { |req| ... }``), asked for every request."""
    try:
        return current_user(Request(scope)) in STAFF
    except HTTPException:
        return False


def _shop(jobs: Conveyor, **dashboard: Any) -> FastAPI:
    api = FastAPI(dependencies=[Depends(current_user)])

    @api.get("/orders")
    def orders() -> dict[str, str]:
        return {"orders": "[]"}

    api.mount("/ops", create_app(jobs, **dashboard))
    return api


def test_a_fastapi_host_authorizes_every_request_to_the_mounted_dashboard(
        jobs: Conveyor) -> None:
    """Issue 49, the reported setup: ``FastAPI(dependencies=[Depends(auth)])`` and the
    dashboard under ``/ops``. Each request is put to the host's check: anonymous and
    non-staff requests are refused (pages, API, actions), staff are served, and an action
    still needs the page's CSRF token (Sidekiq's web UI keeps its own CSRF check when the
    host authenticates)."""
    client = TestClient(_shop(jobs, authorize=staff_only), base_url="http://127.0.0.1",
                        follow_redirects=False)
    assert client.get("/orders").status_code == 401  # the host's own route
    for path in ("/ops/queues", "/ops/api/stats", "/ops/metrics", "/ops/dead"):
        assert client.get(path).status_code == 401, path
    assert client.post("/ops/action", data={"op": "pause", "queue": "exports",
                                            "csrf": "x" * 32}).status_code == 401
    client.cookies.set("shop_session", "s-bob")  # signed in, not staff
    assert client.get("/ops/queues").status_code == 401
    client.cookies.set("shop_session", "s-ada")
    page = client.get("/ops/queues")
    assert page.status_code == 200 and "Queues" in page.text
    forged = client.post("/ops/action", data={"op": "pause", "queue": "exports",
                                              "csrf": "forged-forged-forged"})
    assert forged.status_code == 403
    assert not any(q.paused for q in jobs.storage.queues())
    done = client.post("/ops/action", data={"op": "pause", "queue": "exports", "next": "/queues",
                                            "csrf": csrf_in(page.text)})
    assert done.status_code == 303 and done.headers["location"] == "/ops/queues"
    assert [q.name for q in jobs.storage.queues() if q.paused] == ["exports"]


def test_the_host_check_stays_on_unless_the_host_names_its_hosts(jobs: Conveyor) -> None:
    """Issue 49: ``delegate_auth`` turned the Host check (DNS rebinding) off. With
    ``authorize=`` it stays on: a name the host did not list is refused, ``allowed_hosts=``
    (Django's ``ALLOWED_HOSTS`` form, ``.example.com`` for its subdomains) lets it in."""
    shop = "http://shop.example.com"
    closed = TestClient(_shop(jobs, authorize=staff_only), base_url=shop,
                        cookies={"shop_session": "s-ada"})
    refused = closed.get("/ops/queues")
    assert refused.status_code == 421 and "allowed_hosts" in refused.text
    listed = TestClient(_shop(jobs, authorize=staff_only, allowed_hosts=[".example.com"]),
                        base_url=shop, cookies={"shop_session": "s-ada"})
    assert listed.get("/ops/queues").status_code == 200
    other = TestClient(_shop(jobs, authorize=staff_only, allowed_hosts=[".example.com"]),
                       base_url="http://example.com.evil.test", cookies={"shop_session": "s-ada"})
    assert other.get("/ops/queues").status_code == 421


def test_a_refused_browser_is_sent_to_the_hosts_sign_in_page(jobs: Conveyor) -> None:
    """With ``login_url=``, a refused page view is redirected to the host's sign-in page
    with the address to come back to (Django's ``staff_member_required`` sends anonymous
    users to the admin login with ``?next=``); API calls and actions still get 401."""
    seen: list[bool] = []

    async def check(scope: Any) -> bool:  # an async check is awaited
        seen.append(True)
        return Request(scope).cookies.get("shop_session") == "s-ada"

    client = TestClient(_shop(jobs, authorize=check, login_url="/login?from=ops"),
                        base_url="http://127.0.0.1", follow_redirects=False)
    page = client.get("/ops/dead", params={"queue": "default"})
    assert page.status_code == 303
    assert page.headers["location"] == "/login?from=ops&next=%2Fops%2Fdead%3Fqueue%3Ddefault"
    assert client.get("/ops/api/stats").status_code == 401
    assert client.post("/ops/action", data={"op": "pause", "queue": "x"}).status_code == 401
    client.cookies.set("shop_session", "s-ada")
    assert client.get("/ops/dead").status_code == 200
    assert len(seen) == 4


def test_anything_but_true_refuses(jobs: Conveyor) -> None:
    """A check that returns a user object, None or a string by mistake refuses rather than
    opens the dashboard: only ``True`` lets a request in."""
    for answer in (None, "ada", 1, [True], object()):
        client = TestClient(_shop(jobs, authorize=lambda scope, a=answer: a),
                            base_url="http://127.0.0.1", cookies={"shop_session": "s-ada"})
        assert client.get("/ops/queues").status_code == 401, answer


def test_a_blocking_check_runs_off_the_event_loop(jobs: Conveyor) -> None:
    """A plain function may block (a database lookup, as Django's session store does): it
    runs on a thread, never on the event loop that serves every other request."""
    threads: list[str] = []

    def check(scope: Any) -> bool:
        threads.append(threading.current_thread().name)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return True
        return False  # called on the event loop

    client = TestClient(_shop(jobs, authorize=check), base_url="http://127.0.0.1",
                        cookies={"shop_session": "s-ada"})
    assert client.get("/ops/queues").status_code == 200
    assert len(threads) == 1


def test_mount_at_serves_the_dashboard_beside_a_host_without_a_router(jobs: Conveyor) -> None:
    async def host(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"the host app"})

    client = TestClient(mount_at("/jobs", create_app(jobs), host),  # type: ignore[arg-type]
                        base_url="http://127.0.0.1", follow_redirects=False)
    assert client.get("/").text == "the host app"
    assert client.get("/jobsx").text == "the host app"
    page = client.get("/jobs/batches")
    assert page.status_code == 200 and "/jobs/batches/" in page.text
    assert all(u.startswith("/jobs/") for u in _local_urls(page.text))


def test_a_django_project_lets_in_its_staff_only(tmp_path: Path) -> None:
    """The Django recipe of docs/operations.md, in a real project (its own process: Django is
    configured once per process): ``mount_at`` beside Django's ASGI app, with
    ``user_passes()`` reading Django's session. As ``staff_member_required`` does, anonymous
    and non-staff users are sent to the admin login with ``?next=``; staff are served; an
    action still needs the CSRF token; a Host Django does not allow is refused."""
    done = subprocess.run([sys.executable, "-m", "tests.web.django_ops", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    login = [303, "/admin/login/?next=%2Fops%2Fqueues"]
    assert seen == {
        "anonymous /orders": 302, "anonymous /ops/queues": login,
        "anonymous /ops/api/stats": 401, "anonymous POST": 401, "bob /ops/queues": 303,
        "ada /ops/queues": 200, "ada /orders": 200, "ada POST forged": 403,
        "paused after forged": [], "ada POST": [303, "/ops/queues"], "paused": ["exports"],
        "ada at another host": 421}
