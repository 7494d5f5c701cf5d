"""The same operations surfaces on Redis: the CLI and the dashboard use only the Inspector."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.cli.main import main
from conveyor.web import RunningServer, create_app
from tests.support.redis_server import RedisServer, redis_server_binary
from tests.web.conftest import Client
from tests.web.seed import Seeded, make_app, seed

pytestmark = pytest.mark.redis


@pytest.fixture
def redis_seeded(redis_server: Any) -> Iterator[tuple[str, Seeded]]:
    url = f"{redis_server.url}?prefix=ops{os.urandom(4).hex()}"
    app = make_app(url)
    yield url, seed(app)
    app.close()


def test_cli_on_redis(redis_seeded: tuple[str, Seeded],
                      capsys: pytest.CaptureFixture[str]) -> None:
    url, seeded = redis_seeded
    assert main(["stats", "--json", "--url", url]) == 0
    queues = {q["name"]: q for q in json.loads(capsys.readouterr().out)["queues"]}
    assert queues["exports"]["pending"] == 4 and queues["default"]["dead"] == 1
    assert main(["jobs", "show", seeded.ids["dead"], "--url", url]) == 0
    assert "ConnectionError: inventory service down" in capsys.readouterr().out
    assert main(["dead", "retry-all", "--url", url]) == 0
    assert "retried 1 dead" in capsys.readouterr().out
    assert main(["batch", "show", seeded.batch_id, "--json", "--url", url]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 4


def test_dashboard_on_redis(redis_seeded: tuple[str, Seeded]) -> None:
    url, seeded = redis_seeded
    app = make_app(url)
    server = RunningServer(create_app(app), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        for path in ("/", "/jobs", "/dead", "/workers", f"/batches/{seeded.batch_id}",
                     f"/jobs/{seeded.ids['xss']}"):
            reply = client.get(path)
            assert reply.status == 200 and "<script>alert" not in reply.body, path
        reply = client.post("/action", {"op": "retry", "ids": seeded.ids["dead"],
                                        "csrf": client.csrf()})
        assert reply.status == 303
        record = app.storage.get_job(seeded.ids["dead"])
        assert record is not None and record.state.value == "pending"
        assert "conveyor_queue_jobs" in client.get("/metrics").body
    finally:
        server.stop()
        app.close()


def test_dashboard_says_when_redis_is_down() -> None:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (make test installs Debian's redis-server)")
    server = RedisServer().start()
    app = make_app(server.url)
    web = RunningServer(create_app(app), "127.0.0.1", 0).start()
    try:
        client = Client(web.port)
        assert client.get("/queues").status == 200
        server.stop()
        reply = client.get("/queues")
        assert reply.status == 503 and "Storage unavailable" in reply.body
    finally:
        web.stop()
        app.close()
        server.stop()
        server.cleanup()


@pytest.mark.cluster
def test_cli_and_dashboard_on_redis_cluster(redis_cluster: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    url = f"{redis_cluster.url}?prefix=ops{os.urandom(4).hex()}"
    app = make_app(url)
    seeded = seed(app)
    assert main(["stats", "--json", "--url", url]) == 0
    queues = {q["name"]: q for q in json.loads(capsys.readouterr().out)["queues"]}
    assert queues["exports"]["pending"] == 4 and queues["default"]["dead"] == 1
    server = RunningServer(create_app(app), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        assert seeded.ids["dead"] in client.get("/dead").body
        assert "import products.csv" in client.get(f"/batches/{seeded.batch_id}").body
        reply = client.post("/action", {"op": "retry-all", "state": "dead",
                                        "csrf": client.csrf()})
        assert reply.status == 303
        record = app.storage.get_job(seeded.ids["dead"])
        assert record is not None and record.state.value == "pending"
    finally:
        server.stop()
        app.close()
