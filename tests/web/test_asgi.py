"""``create_app`` as a plain ASGI app: lifespan, and mounting under a prefix (root_path)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from conveyor.web import create_app
from tests.web.seed import make_app, seed


async def _call(app: Any, scope: dict[str, Any], body: bytes = b"") -> tuple[int, dict[str, str],
                                                                            bytes]:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return sent[0]["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


def _scope(path: str, root: str = "", method: str = "GET", query: bytes = b"",
           headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": root,
            "query_string": query, "headers": [(b"host", b"127.0.0.1:8080"), *(headers or [])]}


def test_lifespan_is_acknowledged(tmp_path: Path) -> None:
    app = create_app(make_app(f"sqlite:///{tmp_path / 'a.db'}"))
    events = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return events.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    asyncio.run(app({"type": "lifespan"}, receive, send))
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def test_mounted_under_a_prefix_every_local_link_carries_it(tmp_path: Path) -> None:
    conveyor = make_app(f"sqlite:///{tmp_path / 'm.db'}")
    seeded = seed(conveyor)
    app = create_app(conveyor)
    status, _, body = asyncio.run(_call(app, _scope("/ops/dead", root="/ops")))
    html = body.decode()
    assert status == 200 and seeded.ids["dead"] in html
    assert 'href="/ops/jobs/' in html and 'action="/ops/action"' in html
    assert 'src="/ops/static/app.js"' in html and 'data-api="/ops/api/stats"' in html
    assert 'href="/jobs' not in html and 'action="/action"' not in html
    status, headers, _ = asyncio.run(_call(app, _scope("/ops/static/app.js", root="/ops")))
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    csrf = "c" * 20
    form = f"op=pause&queue=default&next=/queues&csrf={csrf}".encode()
    status, headers, _ = asyncio.run(_call(app, _scope(
        "/ops/action", root="/ops", method="POST",
        headers=[(b"content-type", b"application/x-www-form-urlencoded"),
                 (b"cookie", f"conveyor_csrf={csrf}".encode())]), form))
    assert status == 303 and headers["location"] == "/ops/queues"
    assert {q.name: q.paused for q in conveyor.storage.queues()}["default"]
    conveyor.close()
