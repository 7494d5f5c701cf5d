"""The dashboard and sealed job data (docs/job-data.md, "Encryption at rest"): served over
the bare store it shows sealed arguments, results and messages as ``encrypted`` — on the job
page, in its JSON and in lists; served with the app that holds the key it shows them in
clear; a search says how many jobs it could not read.

Expectation from Sidekiq Enterprise's Web UI ("[encrypted data]" in place of the arguments)
and Oban Web, which shows encrypted args only where the key is configured."""

from __future__ import annotations

import json
from pathlib import Path

from conveyor import Conveyor, Keys
from conveyor.testing import drain
from conveyor.web import RunningServer, create_app
from tests.web.conftest import Client

SECRET = "iban-DE44-5001"


def test_sealed_jobs_read_encrypted_on_the_bare_store_and_clear_with_the_app(
        tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'web.db'}", encrypt=Keys({"k1": Keys.generate()}))

    @app.job(name="pay.out")
    def pay(iban: str) -> str:
        raise ValueError(f"refused {iban}")

    ref = pay.enqueue(SECRET)
    drain(app)
    for source, shown in ((app.storage, False), (app, True)):
        server = RunningServer(create_app(source), "127.0.0.1", 0).start()
        try:
            client = Client(server.port)
            job = json.loads(client.get(f"/api/jobs/{ref.id}").body)
            page = client.get(f"/jobs/{ref.id}").body
            listed = client.get("/jobs?state=retrying").body
            search = client.get("/jobs?q=iban").body
        finally:
            server.stop()
        if shown:
            assert job["args"] == [SECRET] and SECRET in job["message"]
            assert SECRET in page and SECRET in listed
        else:
            assert job["args"] == ["encrypted"] and job["message"] == "encrypted"
            assert SECRET not in page and SECRET not in listed and "encrypted" in page
            assert "1 of the jobs read are encrypted" in search
    app.close()
