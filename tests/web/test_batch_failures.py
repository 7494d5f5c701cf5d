"""A batch's failures, one click away (issue 26): retry its failed or dead jobs from the batch
page, download them as CSV and JSON; the same from the CLI. On SQLite and memory."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

from conveyor import Conveyor
from conveyor.core.job import ErrorInfo, Outcome
from tests.cli.conftest import without_store
from tests.web.conftest import Site
from tests.web.seed import run_one

FORMULA = "=HYPERLINK(\"http://evil.example\")"


def _failing_batch(app: Conveyor) -> tuple[str, dict[str, str]]:
    """Five jobs: two failed (one reason a spreadsheet formula), one dead, two succeeded."""
    with app.batch(description="import rows.csv") as batch:
        for row in range(5):
            app.enqueue("shop.export", [row], {"sku": f"ABC-{row:04d}"}, queue="rows")
    st = app.storage
    ids = {"failed1": run_one(st, "rows", Outcome.FAILED, message="bad SKU"),
           "failed2": run_one(st, "rows", Outcome.FAILED, message=FORMULA),
           "dead": run_one(st, "rows", Outcome.DEAD, message="gave up",
                           error=ErrorInfo("ValueError", "gave up", "Traceback\n")),
           "ok1": run_one(st, "rows", Outcome.SUCCEEDED),
           "ok2": run_one(st, "rows", Outcome.SUCCEEDED)}
    return batch.id, ids


def test_the_batch_page_retries_and_exports_its_failures(site: Site) -> None:
    batch_id, ids = _failing_batch(site.app)
    client = site.client()
    page = client.get(f"/batches/{batch_id}").body
    assert "Retry 2 failed" in page and "Retry 1 dead" in page
    assert f"/batches/{batch_id}/failures.csv" in page
    reply = client.get(f"/batches/{batch_id}/failures.csv")
    assert reply.status == 200 and reply.headers["content-type"] == "text/csv; charset=utf-8"
    assert reply.headers["content-disposition"] == (
        f'attachment; filename="batch-{batch_id}-failures.csv"')
    rows = list(csv.DictReader(io.StringIO(reply.body)))
    assert [(r["id"], r["state"], r["reason"]) for r in rows] == [
        (ids["failed1"], "failed", "bad SKU"), (ids["failed2"], "failed", "'" + FORMULA),
        (ids["dead"], "dead", "gave up")]
    assert json.loads(rows[0]["args"]) == [0] and json.loads(rows[0]["kwargs"]) == {
        "sku": "ABC-0000"}
    dead_only = json.loads(client.get(f"/batches/{batch_id}/failures.json?state=dead").body)
    assert [(r["id"], r["errors"], r["attempts"]) for r in dead_only] == [(ids["dead"], 1, 1)]
    assert client.get(f"/batches/{batch_id}/failures.json?state=nope").status == 400
    assert client.get("/batches/no-such-batch/failures.csv").status == 404
    form = {"op": "retry-batch", "batch": batch_id, "state": "failed", "next": "/"}
    assert client.post("/action", {**form, "csrf": "forged"}).status == 403
    reply = client.post("/action", {**form, "csrf": client.csrf()})
    assert reply.status == 303
    states = {k: site.app.storage.get_job(v).state.value for k, v in ids.items()}
    assert states == {"failed1": "pending", "failed2": "pending", "dead": "dead",
                      "ok1": "succeeded", "ok2": "succeeded"}
    assert "retried 2 failed job(s)" in client.get("/").body


def test_the_cli_retries_and_exports_a_batchs_failures(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    app = Conveyor(url)
    batch_id, ids = _failing_batch(app)
    app.close()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).with_name("conveyor")), *args,
                               "--url", url],
                              capture_output=True, text=True, timeout=60)

    out = cli("batch", "failures", batch_id, "--format", "json", "--state", "all")
    assert out.returncode == 0, out.stderr
    assert [r["id"] for r in json.loads(out.stdout)] == [ids["failed1"], ids["failed2"],
                                                        ids["dead"]]
    target = tmp_path / "failures.csv"
    assert cli("batch", "failures", batch_id, "-o", str(target)).returncode == 0
    assert target.read_text().splitlines()[0] == (
        "id,name,state,args,kwargs,reason,attempts,errors,finished_at")
    done = cli("batch", "retry", batch_id, "--state", "dead")
    assert done.returncode == 0 and f"retried 1 dead job(s) of batch {batch_id}" in done.stdout
    missing = cli("batch", "retry", "nope")
    assert missing.returncode != 0 and len(without_store(missing.stderr).strip().splitlines()) == 1


def test_the_retrying_and_dead_pages_say_when(site: Site) -> None:
    client = site.client()
    retrying = client.get("/retrying").body
    assert "<th>Next run</th>" in retrying
    record = site.app.storage.get_job(site.seeded.ids["retrying"])
    assert record is not None and f'data-ts="{record.run_at}"' in retrying
    dead = client.get("/dead").body
    died = site.app.storage.get_job(site.seeded.ids["dead"])
    assert "<th>Died</th>" in dead and died is not None
    assert f'data-ts="{died.finished_at}"' in dead


def test_job_lists_are_newest_first_and_filter_by_name_queue_and_text(site: Site) -> None:
    client = site.client()
    ids = site.seeded.ids
    listed = client.get("/jobs").body
    assert listed.index(ids["scheduled"]) < listed.index(ids["succeeded"])  # newest first
    oldest = client.get("/jobs?order=oldest").body
    assert oldest.index(ids["succeeded"]) < oldest.index(ids["scheduled"])
    found = client.get("/jobs?q=seller+not+qualified").body  # text of a message
    assert ids["failed"] in found and ids["dead"] not in found
    assert "1 found among the" in found
    by_id = client.get(f"/jobs?q={ids['dead']}").body
    assert ids["dead"] in by_id and ids["failed"] not in by_id
    named = client.get("/jobs?name=shop.export&queue=exports").body
    assert site.seeded.batch_id and ids["failed"] not in named and "shop.export" in named
    assert 'name="q"' in client.get("/dead").body  # every list has the filters


def test_the_cli_lists_newest_first_and_searches(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'list.db'}"
    app = Conveyor(url)
    first = app.enqueue("shop.register", [1, "alpha"])
    second = app.enqueue("shop.register", [2, "beta"])
    assert first is not None and second is not None
    app.close()
    conveyor = str(Path(sys.executable).with_name("conveyor"))

    def ids(*args: str) -> list[str]:
        out = subprocess.run([conveyor, "jobs", "list", *args, "--json", "--url", url],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return [j["id"] for j in json.loads(out.stdout)["jobs"]]

    assert ids() == [first.id, second.id]
    assert ids("--newest") == [second.id, first.id]
    assert ids("--search", "BETA") == [second.id]
    assert ids("--name", "shop.register", "--search", first.id) == [first.id]
