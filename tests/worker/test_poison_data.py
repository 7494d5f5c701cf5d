"""Poison text and payloads harm only their own job (memory and SQLite; the hypothesis test in
tests/conformance covers Redis too)."""

from __future__ import annotations

import json
import logging

import pytest

from conveyor import Conveyor, Fail, JobState, current_job
from conveyor.core.ids import new_id
from conveyor.core.job import Ack, EventKind, JobSpec
from conveyor.core.serializer import encode_payload
from conveyor.worker.acker import Acker
from conveyor.worker.config import WorkerConfig
from conveyor.worker.processor import Processor

LONE = "bad \ud800 text"
REPLACED = "bad \ufffd text"


def _run_all(app: Conveyor, config: WorkerConfig, count: int) -> Acker:
    """Lease ``count`` jobs in one fetch, run each through the Processor, ack them in one batch."""
    processor = Processor(app, "test-worker", app.clock)
    acker = Acker(app.storage, app.clock, config)
    jobs = app.storage.dequeue(["default"], "test-worker", count, 30.0)
    assert len(jobs) == count
    for job in jobs:
        prepared = processor.prepare(job)
        acker.add(prepared if isinstance(prepared, Ack) else processor.run(prepared))
    acker.tick()
    return acker


def test_lone_surrogates_in_every_text_a_job_writes_are_stored(
    app: Conveyor, config: WorkerConfig
) -> None:
    @app.job(name="t.fail")
    def fail(text: str) -> None:
        current_job().log(text, detail=text)
        raise Fail(text)

    @app.job(name="t.error", retry=0)
    def error(text: str) -> None:
        raise ValueError(text)

    @app.job(name="t.result")
    def result(text: str) -> list[str]:
        return [text, json.loads('"\\udfff"')]

    refs = [fail.enqueue(LONE), error.enqueue(LONE), result.enqueue(LONE)]
    good = [result.enqueue("fine") for _ in range(3)]
    acker = _run_all(app, config, 6)
    assert len(acker) == 0 and acker.written == 6

    failed = app.get_job(refs[0].id)
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.message == REPLACED and failed.args == [LONE]  # data round-trips exactly
    [logged] = [e for e in failed.events or () if e.kind == EventKind.MESSAGE]
    assert logged.message == REPLACED and logged.data == {"detail": LONE}

    dead = app.get_job(refs[1].id)
    assert dead is not None and dead.state is JobState.DEAD and REPLACED in (dead.message or "")
    [err] = [e for e in dead.events or () if e.kind == EventKind.DEAD]
    assert err.data is not None and err.data["message"] == REPLACED
    assert "\ud800" not in err.data["traceback"]

    done = app.get_job(refs[2].id)
    assert done is not None and done.state is JobState.SUCCEEDED
    assert json.loads(done.result or "null") == [LONE, "\udfff"]
    assert all(app.get_job(r.id).state is JobState.SUCCEEDED for r in good)  # type: ignore[union-attr]


def _nested_payload(levels: int) -> str:
    return '{"a":[' + "[" * levels + "]" * levels + '],"k":{}}'


def test_a_stored_payload_nested_too_deeply_kills_only_its_job(
    app: Conveyor, config: WorkerConfig
) -> None:
    @app.job(name="t.ok")
    def ok(*args: object) -> str:
        return "ok"

    ok.enqueue()
    deep = JobSpec(id=new_id(), name="t.ok", queue="default", payload=_nested_payload(100_000))
    app.storage.enqueue([deep])  # written by another client: the door was not ours
    ok.enqueue()
    acker = _run_all(app, config, 3)
    assert len(acker) == 0
    record = app.get_job(deep.id)
    assert record is not None and record.state is JobState.DEAD
    assert "nested too deeply" in (record.message or "")
    states = [r.state for r in app.storage.list_jobs(state=JobState.SUCCEEDED)]
    assert states == [JobState.SUCCEEDED] * 2


def test_a_name_with_control_characters_is_escaped_in_the_worker_log(
    app: Conveyor, config: WorkerConfig, caplog: pytest.LogCaptureFixture
) -> None:
    forged = "x\n2030-01-01 INFO conveyor.worker: all good\x1b[2J"
    # another client, no client-side check; no retries, so the unknown name is dead at once
    spec = JobSpec(id=new_id(), name=forged, queue="default", payload=encode_payload([], {}),
                   max_retries=0)
    app.storage.enqueue([spec])
    with caplog.at_level(logging.ERROR, logger="conveyor.worker"):
        _run_all(app, config, 1)
    [line] = [r.getMessage() for r in caplog.records if spec.id in r.getMessage()]
    assert "\n" not in line and "\x1b" not in line and "\\n2030" in line
    record = app.get_job(spec.id)
    assert record is not None and record.state is JobState.DEAD
