"""examples/fastapi_app, driven through FastAPI's TestClient: a report enqueued from an
endpoint runs and its status endpoint shows the result; an import batch reports its progress
and its failed row; with OpenTelemetry on, the job carries the caller's trace."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient

from conveyor.testing import drain

TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("CONVEYOR_URL", f"sqlite:///{tmp_path}/jobs.db")
    monkeypatch.setenv("CONVEYOR_OTEL", "1")
    sys.modules.pop("examples.fastapi_app.app", None)
    module = importlib.import_module("examples.fastapi_app.app")
    yield module
    sys.modules.pop("examples.fastapi_app.app", None)


def test_the_fastapi_example_enqueues_and_reports(example: ModuleType) -> None:
    headers = {"traceparent": f"00-{TRACE}-b7ad6b7169203331-01"}
    with TestClient(example.api, base_url="http://127.0.0.1") as client:
        job_id = client.post("/reports/42", params={"month": "2026-11"},
                             headers=headers).json()["job_id"]
        assert client.get(f"/status/{job_id}").json()["state"] == "pending"
        rows = [{"sku": "ABC-0001"}, {"sku": "bad"}, {"sku": "XYZ-0002"}]
        batch_id = client.post("/imports", json=rows).json()["batch_id"]
        assert client.get(f"/imports/{batch_id}").json()["total"] == 3
        drain(example.jobs)
        report = client.get(f"/status/{job_id}").json()
        progress = client.get(f"/imports/{batch_id}").json()
        assert client.get("/status/nope").status_code == 404
        board = client.get(f"/jobs/batches/{batch_id}")  # the dashboard mounted at /jobs
        assert board.status_code == 200
        assert f"/jobs/batches/{batch_id}/failures.csv" in board.text
        assert client.get("/imports/nope").status_code == 404
    assert report == {"state": "succeeded", "message": None, "attempt": 1,
                      "result": {"customer": 42, "month": "2026-11", "orders": 0}}
    assert progress["complete"] and progress["counts"]["succeeded"] == 2
    assert [f["message"] for f in progress["failures"]] == ["row 2: bad SKU 'bad'"]
    record = example.jobs.get_job(job_id)
    carried = json.loads(record.payload)["m"]["otel"]["traceparent"]
    assert carried.split("-")[1] == TRACE  # the request's trace, carried into the job
