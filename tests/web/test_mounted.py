"""The dashboard mounted under a path prefix inside another ASGI app (issue 26): FastAPI's
``mount`` and ``conveyor.web.mount_at`` (for hosts with no router, as Django's ASGI app):
links, assets, redirects and cookies under the prefix, the token working through the host,
or authentication delegated to it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from conveyor import Conveyor, JobState
from conveyor.web import create_app, mount_at
from tests.web.seed import make_app, seed

TOKEN = "a-token-of-32-characters-or-more!"


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Conveyor]:
    app = make_app(f"sqlite:///{tmp_path / 'web.db'}")
    seed(app)
    yield app
    app.close()


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


def test_authentication_delegated_to_the_host(jobs: Conveyor) -> None:
    api = FastAPI()
    api.mount("/ops", create_app(jobs, delegate_auth=True))
    client = TestClient(api, base_url="http://shop.example.com", follow_redirects=False)
    page = client.get("/ops/queues")  # any Host: the host app checks it
    assert page.status_code == 200 and "Queues" in page.text
    assert client.post("/ops/action", data={"op": "pause", "queue": "exports",
                                            "csrf": "forged"}).status_code == 403
    with pytest.raises(ValueError, match="give no token"):
        create_app(jobs, token=TOKEN, delegate_auth=True)


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
