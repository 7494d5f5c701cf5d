"""Every page and API over real HTTP: content, escaping, GET never changes state."""

from __future__ import annotations

import html
import json

import pytest

from conveyor.core.job import Event, EventKind
from tests.web.conftest import Site
from tests.web.seed import XSS

PAGES = ["/", "/queues", "/jobs", "/jobs?state=dead", "/jobs?queue=exports", "/scheduled",
         "/retrying", "/dead", "/batches", "/workflows", "/workers", "/periodic"]


@pytest.mark.parametrize("path", PAGES)
def test_pages_load_with_nav_and_security_headers(site: Site, path: str) -> None:
    reply = site.client().get(path)
    assert reply.status == 200
    assert '<nav><a href="/"' in reply.body and 'id="live"' in reply.body
    assert "script-src 'self'" in reply.headers["content-security-policy"]
    assert reply.headers["x-frame-options"] == "DENY"


def test_partial_returns_only_the_live_region(site: Site) -> None:
    reply = site.client().get("/jobs?state=dead&partial=1")
    assert reply.status == 200 and "<html" not in reply.body
    assert site.seeded.ids["dead"] in reply.body


def test_job_arguments_and_messages_are_escaped_everywhere(site: Site) -> None:
    client = site.client()
    xss_id = site.seeded.ids["xss"]
    for path in ("/jobs", f"/jobs/{xss_id}", "/workers", f"/batches/{site.seeded.batch_id}"):
        body = client.get(path).body
        assert "<script>alert" not in body, path
    assert html.escape(XSS) in client.get(f"/jobs/{xss_id}").body


def test_job_page_shows_timeline_and_traceback(site: Site) -> None:
    body = site.client().get(f"/jobs/{site.seeded.ids['dead']}").body
    for needle in ("Timeline", "enqueued", "started", "gave up", "ConnectionError",
                   "inventory service down", "File &quot;shop.py&quot;, line 9"):
        assert needle in body


def test_lists_show_the_right_jobs(site: Site) -> None:
    client = site.client()
    ids = site.seeded.ids
    assert ids["dead"] in client.get("/dead").body
    assert ids["dead"] not in client.get("/retrying").body
    assert ids["retrying"] in client.get("/retrying").body
    assert ids["scheduled"] in client.get("/scheduled").body
    assert "host-a" in client.get("/workers").body
    batch = client.get(f"/batches/{site.seeded.batch_id}").body
    assert "import products.csv" in batch and 'data-percent="0.0"' in batch


def test_json_api_and_metrics(site: Site) -> None:
    client = site.client()
    stats = json.loads(client.get("/api/stats").body)
    assert stats["totals"]["pending"] == 5 and stats["workers"]["busy"] == 1
    job = json.loads(client.get(f"/api/jobs/{site.seeded.ids['dead']}").body)
    assert job["state"] == "dead" and job["errors_detail"][0]["type"] == "ConnectionError"
    batch = json.loads(client.get(f"/api/batches/{site.seeded.batch_id}").body)
    assert batch["total"] == 4
    assert json.loads(client.get("/api/workers").body)[0]["id"] == site.seeded.worker_id
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'conveyor_queue_jobs{queue="default",state="dead"} 1' in metrics.body
    assert "conveyor_batches_active 1" in metrics.body


def test_unknown_things_are_404(site: Site) -> None:
    client = site.client()
    assert client.get("/jobs/nope").status == 404
    assert client.get("/api/jobs/nope").status == 404
    assert client.get("/nowhere").status == 404
    assert client.get("/static/../app.py").status == 404
    assert client.get("/static/app.js").status == 200


def test_get_never_changes_state(site: Site) -> None:
    client = site.client()
    dead = site.seeded.ids["dead"]
    for path in (f"/action?op=retry&ids={dead}", f"/jobs/{dead}?op=retry",
                 "/action?op=pause&queue=default"):
        assert client.get(path).status in (404, 200)
    assert site.state("dead") == "dead"
    assert not any(q.paused for q in site.app.storage.queues())


def test_running_job_shows_its_progress_and_latest_message(site: Site) -> None:
    st = site.app.storage
    [job] = st.dequeue(["exports"], "w-live", 1, 60.0)
    event = Event(ts=st.now(), kind=EventKind.MESSAGE, message="row 40 of 100 <b>ok</b>")
    assert st.log(job.id, job.token, [event], progress=(40, 100))
    client = site.client()
    page = client.get(f"/jobs/{job.id}").body
    assert '<progress max="100" value="40"></progress> 40 / 100' in page
    assert "row 40 of 100 &lt;b&gt;ok&lt;/b&gt;" in page
    batch = client.get(f"/batches/{site.seeded.batch_id}?state=active").body
    assert job.id in batch and "row 40 of 100 &lt;b&gt;ok&lt;/b&gt;" in batch


def test_periodic_page_lists_schedules_with_pause_buttons(site: Site) -> None:
    body = site.client().get("/periodic").body
    for needle in ("nightly-export", "0 3 * * *", "Europe/Berlin", "restock-check",
                   'name="op" value="pause-schedule"'):
        assert needle in body, needle
    rows = {r["name"]: r for r in json.loads(site.client().get("/api/periodic").body)}
    assert rows["restock-check"]["last_tick"] and rows["nightly-export"]["next_tick"]
    assert all(r["queue_listened"] for r in rows.values()) and "no worker" not in body


def test_periodic_page_flags_a_queue_no_worker_listens_to(site: Site) -> None:
    site.app.storage.unregister_worker(site.seeded.worker_id)  # the only worker, gone
    body = site.client().get("/periodic").body
    assert body.count(">no worker</span>") == 2
    rows = {r["name"]: r for r in json.loads(site.client().get("/api/periodic").body)}
    assert not rows["nightly-export"]["queue_listened"]


def test_workflows_are_listed_with_their_nodes_linking_to_each_event_log(site: Site) -> None:
    app = site.app
    export = app.registry.get("shop.export")
    assert export is not None
    wf = app.workflow(description="nightly <b>export</b>")
    first = wf.add(export.s(1))
    last = wf.add(export.s(2), after=[first])
    wf.enqueue()
    client = site.client()
    listing = client.get("/workflows").body
    assert "nightly &lt;b&gt;export&lt;/b&gt;" in listing and f"/batches/{wf.id}" in listing
    assert wf.id not in client.get("/batches").body  # batches and workflows are listed apart
    page = client.get(f"/batches/{wf.id}").body
    assert "Workflow nightly" in page
    for ref in (first, last):
        assert f'href="/jobs/{ref.id}"' in page
    assert "s-waiting" in page and "s-pending" in page
    waiting = client.get(f"/batches/{wf.id}?state=waiting").body
    assert last.id in waiting and first.id not in waiting
    assert "released" not in client.get(f"/jobs/{last.id}").body


def test_the_workflow_graph_page_draws_every_node_live(site: Site) -> None:
    app = site.app
    export = app.registry.get("shop.export")
    assert export is not None
    wf = app.workflow(description="graph <i>me</i>")
    first = wf.add(export.s(1))
    wide = wf.add_group([export.s(i) for i in range(30)], after=[first])  # summarised
    last = wf.add(export.s(2), after=wide)
    wf.enqueue()
    client = site.client()
    page = client.get(f"/workflows/{wf.id}").body
    assert "Workflow graph &lt;i&gt;me&lt;/i&gt;" in page
    assert '<svg class="graph"' in page and page.count('class="edge"') == 2
    for ref in (first, last):  # single nodes link to their job's event log
        assert f'href="/jobs/{ref.id}"' in page
    assert "shop.export ×30" in page and f'href="/jobs/{wide[0].id}"' not in page
    assert 'data-state="pending"' in page and 'data-state="waiting"' in page
    assert f'href="/batches/{wf.id}"' in page  # the jobs view, one click away
    assert f'href="/workflows/{wf.id}"' in client.get(f"/batches/{wf.id}").body
    partial = client.get(f"/workflows/{wf.id}?partial=1").body
    assert "<html" not in partial and '<svg class="graph"' in partial
    node_page = client.get(f"/jobs/{last.id}").body  # a node's page leads back to the graph
    assert "<dt>Workflow</dt>" in node_page and f'href="/workflows/{wf.id}"' in node_page
    assert "<dt>Batch</dt>" in client.get(f"/jobs/{site.seeded.ids['dead']}").body
    missing = client.get("/workflows/no-such-workflow")  # named as what was looked for
    assert missing.status == 404 and "no workflow with id" in missing.body
    batch = client.get(f"/workflows/{site.seeded.batch_id}")
    assert batch.status == 404 and "it is a batch" in batch.body
