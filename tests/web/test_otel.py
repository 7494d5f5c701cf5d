"""OpenTelemetry spans for enqueue and run, linked through the job's meta, on real jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="pip install opentelemetry-sdk (in .[dev])")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from conveyor import Conveyor, Fail
from conveyor.otel import instrument
from conveyor.testing import drain


def test_job_spans_are_children_of_their_enqueue(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = Conveyor(f"sqlite:///{tmp_path / 'otel.db'}")
    instrument(app, provider)

    @app.job(name="greet", retry=0)
    def greet(who: str) -> str:
        return f"hi {who}"

    @app.job(name="refuse", retry=0)
    async def refuse() -> None:
        raise Fail("no")

    greet.enqueue("ann")
    refuse.enqueue()
    assert drain(app) == 2
    spans = {s.name: s for s in exporter.get_finished_spans()}
    enqueue, run = spans["enqueue greet"], spans["run greet"]
    assert enqueue.kind == SpanKind.PRODUCER and run.kind == SpanKind.CONSUMER
    assert run.context.trace_id == enqueue.context.trace_id
    assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
    assert run.attributes["conveyor.outcome"] == "succeeded"
    assert run.attributes["conveyor.queue"] == "default"
    failed = spans["run refuse"]
    assert failed.attributes["conveyor.outcome"] == "failed"
    assert failed.status.status_code == StatusCode.ERROR
    app.close()
