"""Prometheus text: scrape-time figures through the Inspector, and the in-process histogram."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from conveyor import Conveyor, Fail
from conveyor.http.metrics import Histogram, MetricsMiddleware, render, render_inspector
from conveyor.testing import drain
from tests.web.conftest import Site
from tests.web.seed import make_app, seed

LINE = re.compile(r'^[a-z_]+(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? -?[0-9.e+\-Inf]+$')


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert LINE.match(line), f"not exposition format: {line!r}"
            key, value = line.rsplit(" ", 1)
            out[key] = float(value.replace("+Inf", "inf"))
    return out


def test_scrape_time_metrics_from_the_inspector(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'm.db'}")
    seed(app)
    samples = _samples(render_inspector(app.storage))
    assert samples['conveyor_queue_jobs{queue="exports",state="pending"}'] == 4
    assert samples['conveyor_queue_jobs{queue="default",state="retrying"}'] == 1
    assert samples['conveyor_queue_paused{queue="default"}'] == 0
    assert samples['conveyor_queue_latency_seconds{queue="exports"}'] >= 0
    key = '{queue="default",name="shop.register"}'
    assert samples[f"conveyor_jobs_processed_total{key}"] == 1
    assert samples[f"conveyor_jobs_dead_total{key}"] == 1
    assert samples['conveyor_worker_slots{state="total"}'] == 5
    assert samples['conveyor_worker_slots{state="busy"}'] == 1
    assert samples["conveyor_workers"] == 1
    assert samples["conveyor_batches_active"] == 1
    # 4 ready exports, the live worker's 5 slots: one worker (views/scaling.py)
    assert samples['conveyor_desired_workers{queue="exports"}'] == 1
    app.storage.cancel_batch(app.storage.list_batches()[0].id)
    assert _samples(render_inspector(app.storage))["conveyor_batches_active"] == 0
    app.close()


def test_label_values_are_escaped() -> None:
    hist = Histogram("h_seconds", "help", ("name",), buckets=(1.0,))
    hist.observe(0.5, 'we"ird\\name\n')
    text = render([hist.family()])
    assert 'h_seconds_bucket{name="we\\"ird\\\\name\\n",le="1"} 1' in text
    assert 'le="+Inf"} 1' in text and "h_seconds_count" in text


def test_middleware_histogram_counts_outcomes_through_real_jobs(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'h.db'}")
    mw = MetricsMiddleware(buckets=(0.5, 60.0))
    app.server_middleware.add(mw)

    @app.job(name="ok", retry=0)
    def ok() -> int:
        return 1

    @app.job(name="nope", retry=0)
    def nope() -> None:
        raise Fail("business says no")

    @app.job(name="boom", retry=0)
    def boom() -> None:
        raise RuntimeError("bug")

    @app.job(name="aok", retry=0)
    async def aok() -> int:
        return 2

    for fn in (ok, ok, nope, boom, aok):
        fn.enqueue()
    assert drain(app) == 5
    samples = _samples(mw.render())
    assert samples['conveyor_job_duration_seconds_count{queue="default",name="ok",'
                   'outcome="succeeded"}'] == 2
    assert samples['conveyor_job_duration_seconds_count{queue="default",name="nope",'
                   'outcome="failed"}'] == 1
    assert samples['conveyor_job_duration_seconds_count{queue="default",name="boom",'
                   'outcome="error"}'] == 1
    assert samples['conveyor_job_duration_seconds_bucket{queue="default",name="aok",'
                   'outcome="succeeded",le="+Inf"}'] == 1
    server = mw.serve(0)
    try:
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as resp:
            assert 'name="boom"' in resp.read().decode()
    finally:
        server.stop()
    app.close()


def test_api_scale_hint_is_what_keda_s_metrics_api_scaler_reads(site: Site) -> None:
    """KEDA's metrics-api scaler reads one number from JSON (``valueLocation``): the seed's 4
    ready exports on workers of 2 slots want 2 workers; a bad query value is the default."""
    client = site.client()
    view = json.loads(client.get("/api/scale-hint?queue=exports&slots=2&latency_target=0").body)
    assert view["total"] == view["queues"]["exports"]["workers"] == 2
    assert view["queues"]["exports"]["slots"] == 4
    every = json.loads(client.get("/api/scale-hint?slots=abc").body)
    assert set(every["queues"]) == {"default", "exports"}
    # slots from the live worker (5): the 4 exports fit in one
    assert every["queues"]["exports"]["workers"] == 1
