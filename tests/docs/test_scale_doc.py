"""docs/operations.md's KEDA examples ("The scale signal") are YAML that a ``ScaledObject``
takes, and they name what conveyor really serves: the gauge in the metrics text, the JSON
route and the field the metrics-api scaler reads. So the example cannot rot.

Expectations from KEDA's own docs: a ``ScaledObject`` (``keda.sh/v1alpha1``) names its
target and its triggers; the prometheus trigger needs ``serverAddress``, ``query`` and
``threshold``; the metrics-api trigger ``url``, ``valueLocation`` and ``targetValue``; their
numbers are strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from conveyor.http.metrics import render_inspector
from conveyor.web.routes import ROUTES
from tests.web.conftest import Site, serve_site

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """The dashboard over the web tests' seeded SQLite store (queues default and exports)."""
    yield from serve_site(tmp_path, None)


def _keda_blocks() -> list[dict[str, Any]]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## The scale signal", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return [yaml.safe_load(block) for block in blocks]


def _trigger(kind: str) -> dict[str, Any]:
    [found] = [t for doc in _keda_blocks() for t in doc["spec"]["triggers"] if t["type"] == kind]
    return found


def test_every_example_is_a_scaled_object_that_may_scale_to_zero() -> None:
    docs = _keda_blocks()
    assert len(docs) == 2
    for doc in docs:
        assert (doc["apiVersion"], doc["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
        spec = doc["spec"]
        assert spec["scaleTargetRef"]["name"] and spec["minReplicaCount"] == 0
        assert spec["maxReplicaCount"] >= 1
        for trigger in spec["triggers"]:
            assert all(isinstance(v, str) for v in trigger["metadata"].values())


def test_the_prometheus_query_names_the_gauge_conveyor_serves(site: Site) -> None:
    meta = _trigger("prometheus")["metadata"]
    assert {"serverAddress", "query", "threshold"} <= set(meta)
    served = render_inspector(site.app.storage)
    [(name, queue)] = re.findall(r'(conveyor_[a-z_]+)\{queue="([^"]+)"\}', meta["query"])
    assert f"# TYPE {name} gauge" in served
    assert f'{name}{{queue="{queue}"}} ' in served


def test_the_metrics_api_example_reads_a_number_from_the_real_route(site: Site) -> None:
    meta = _trigger("metrics-api")["metadata"]
    url = urlsplit(meta["url"])
    assert any(pattern.fullmatch(url.path) for pattern, _ in ROUTES)
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert set(query) <= {"queue", "slots", "latency_target"}
    reply = site.client().get(f"{url.path}?{url.query}")
    assert reply.status == 200
    value: Any = json.loads(reply.body)
    for part in meta["valueLocation"].split("."):
        value = value[part]
    assert isinstance(value, int)
