"""The job page and ``/api/jobs/<id>`` of a durable job (docs/durable.md): the steps table
(name, status, ended, duration, result summary, escaped) and what a sleeping job waits for.
Issue 55, item 1 ("each step shows in ... the job page") and item 2 (a waiting state the
dashboard shows)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from conveyor import Conveyor, FakeClock, current_job
from conveyor.testing import drain
from conveyor.web import RunningServer, create_app
from tests.web.conftest import Client
from tests.web.seed import XSS


def test_job_page_shows_steps_and_what_the_job_waits_for(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'web.db'}", clock=FakeClock())

    @app.job(name="shop.fulfil")
    def fulfil(order: int) -> None:
        ctx = current_job()
        ctx.step("charge", lambda: {"note": XSS})
        ctx.wait_for("payment.settled", key=str(order), timeout=3600)

    ref = fulfil.enqueue(42)
    drain(app)
    server = RunningServer(create_app(app, None), "127.0.0.1", 0).start()
    try:
        client = Client(server.port)
        body = client.get(f"/jobs/{ref.id}").body
        assert "<h2>Steps</h2>" in body and "<script>alert" not in body
        assert html.escape(json.dumps({"note": XSS}, separators=(",", ":"))) in body
        assert "Waits for" in body and "payment.settled" in body
        api = json.loads(client.get(f"/api/jobs/{ref.id}").body)
        assert api["durable"]["waiting_for"]["name"] == "payment.settled"
        assert api["durable"]["waiting_for"]["key"] == "42"
        assert [s["name"] for s in api["durable"]["steps"]] == ["charge"]
    finally:
        server.stop()
        app.close()
