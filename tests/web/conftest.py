"""A seeded SQLite store served by the real dashboard on a free port, and an HTTP client."""

from __future__ import annotations

import base64
import http.client
import re
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode

import pytest

from conveyor import Conveyor
from conveyor.web import RunningServer, create_app
from tests.web.seed import Seeded, make_app, seed

TOKEN = "s3cret-token"


@dataclass
class Reply:
    """An HTTP response, read."""

    status: int
    headers: dict[str, str]
    body: str


class Client:
    """A tiny HTTP client that keeps cookies and never follows redirects."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: dict[str, str | list[str]] | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        """Send one request; form bodies are url-encoded."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        hdrs = dict(headers or {})
        if self.cookies:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        data = None
        if body is not None:
            data = urlencode(body, doseq=True)
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        reply = Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()},
                      resp.read().decode())
        for raw in resp.headers.get_all("set-cookie") or []:
            cookie = SimpleCookie()
            cookie.load(raw)
            self.cookies.update({k: m.value for k, m in cookie.items()})
        conn.close()
        return reply

    def get(self, path: str, **headers: str) -> Reply:
        """GET a path."""
        return self.request("GET", path, headers=headers)

    def post(self, path: str, form: dict[str, str | list[str]], **headers: str) -> Reply:
        """POST a form."""
        return self.request("POST", path, form, headers)

    def csrf(self) -> str:
        """The CSRF token the dashboard embedded in its pages (GET / first if needed)."""
        if "conveyor_csrf" not in self.cookies:
            self.get("/")
        return self.cookies["conveyor_csrf"]


def basic(user: str, password: str) -> str:
    """An HTTP basic ``Authorization`` value."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def csrf_in(html: str) -> str:
    """The CSRF value a page's forms carry."""
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


@dataclass
class Site:
    """A served dashboard over a seeded store."""

    app: Conveyor
    seeded: Seeded
    server: RunningServer

    def client(self) -> Client:
        """A fresh client (no cookies)."""
        return Client(self.server.port)

    def state(self, key: str) -> str:
        """The stored state of a seeded job."""
        record = self.app.storage.get_job(self.seeded.ids[key])
        return record.state.value if record else "gone"


def serve_site(tmp_path: Path, token: str | None, url: str | None = None) -> Iterator[Site]:
    """Seed a store (SQLite in ``tmp_path`` unless ``url``) and serve the dashboard over it."""
    app = make_app(url or f"sqlite:///{tmp_path / 'web.db'}")
    seeded = seed(app)
    server = RunningServer(create_app(app, token), "127.0.0.1", 0).start()
    try:
        yield Site(app, seeded, server)
    finally:
        server.stop()
        app.close()


@pytest.fixture(params=["sqlite", "memory"])
def site(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Site]:
    """An open dashboard (no token), as on 127.0.0.1 by default, on SQLite and memory."""
    yield from serve_site(tmp_path, None, "memory://" if request.param == "memory" else None)


@pytest.fixture
def locked_site(tmp_path: Path) -> Iterator[Site]:
    """A dashboard protected by ``TOKEN``."""
    yield from serve_site(tmp_path, TOKEN)


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Conveyor]:
    """A seeded SQLite store's app, not served (a test mounts or serves it its own way)."""
    app = make_app(f"sqlite:///{tmp_path / 'web.db'}")
    seed(app)
    yield app
    app.close()
