"""Same story, same record: one scripted scenario on every backend leaves identical records.

A real worker (components ticked under a fake clock) runs a success, a job that logs and
reports progress, an async success, a ``Fail``, an error then a success, errors until dead, a
timeout then a success, a cancel while waiting, a cancel while running, a retry by hand and a
batch. Each job's record and event sequence, normalized (ids, times, worker ids and
tracebacks aside), and the batch's counters must be the same on memory, SQLite, Redis and
Redis Cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.core.job import JobRecord
from conveyor.storage import Backend
from tests.model.harness import Bodies, Worker, register
from tests.model.stores import BACKENDS, store_factory

#: label → (job name, queue, plan); the batch's jobs are labelled ``batch-*``.
JOBS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "success": ("sync", "a", ("ok",)),
    "logs": ("sync", "a", ("log",)),
    "async": ("async", "a", ("ok",)),
    "fail": ("sync", "a", ("fail",)),
    "error-then-success": ("sync", "a", ("raise", "ok")),
    "error-until-dead": ("async", "a", ("raise",)),
    "timeout-then-success": ("sync", "a", ("hold", "ok")),
    "cancel-while-waiting": ("sync", "b", ("ok",)),
    "cancel-while-running": ("sync", "a", ("hold",)),
    "retry-by-hand": ("sync", "a", ("fail", "ok")),
}
BATCH: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "batch-success": ("sync", "a", ("ok",)),
    "batch-dead": ("sync", "a", ("raise",)),
}


def _event(event: Any) -> dict[str, Any]:
    data = dict(event.data or {})
    data.pop("traceback", None)  # file paths of this checkout
    return {"kind": event.kind, "state": event.state, "message": event.message,
            "attempt": event.attempt, "data": data}


def _normalized(record: JobRecord | None) -> dict[str, Any]:
    assert record is not None
    return {
        "name": record.name, "queue": record.queue, "state": record.state.value,
        "attempt": record.attempt, "errors": record.errors, "recoveries": record.recoveries,
        "message": record.message, "result": record.result, "progress": record.progress,
        "cancel_requested": record.cancel_requested, "in_batch": record.batch_id is not None,
        "events": [_event(e) for e in record.events or ()],
    }


def run_scenario(storage: Backend, clock: FakeClock) -> dict[str, Any]:
    """Play the scenario on ``storage``; return every job's normalized record."""
    bodies = Bodies()
    client = register(Conveyor(storage=storage, clock=clock), bodies, new_code=True)
    ids: dict[str, str] = {}

    def enqueue(label: str, spec: tuple[str, str, tuple[str, ...]]) -> None:
        name, queue, plan = spec
        ref = client.enqueue(name, kwargs={"plan": list(plan)}, queue=queue)
        assert ref is not None
        ids[label] = ref.id

    storage.pause_queue("b")
    for label, spec in JOBS.items():
        enqueue(label, spec)
    with client.batch() as batch:
        for label, spec in BATCH.items():
            enqueue(label, spec)
    worker = Worker(register(Conveyor(storage=storage, clock=clock), bodies, new_code=True),
                    clock, bodies, "w1", True, concurrency=20)
    try:
        assert client.cancel(ids["cancel-while-waiting"]) is not None
        assert len(worker.fetch()) == len(JOBS) + len(BATCH) - 1
        running = ids["cancel-while-running"]
        assert client.cancel(running) is not None
        worker.tick(worker.launcher.heartbeat.tick)  # the job sees ctx.cancelled
        bodies.release((running, 1), "raise")
        worker.settle()
        clock.advance(6)  # past the sync job's 5 s timeout
        worker.tick(worker.launcher.heartbeat.tick, worker.launcher.watchdog.tick)
        bodies.release((ids["timeout-then-success"], 1), "ok")  # abandoned: its end is void
        worker.settle()
        assert storage.retry_jobs([ids["retry-by-hand"]]) == 1
        for _ in range(10):
            clock.advance(3)
            worker.tick(worker.launcher.heartbeat.tick, worker.launcher.poller.tick,
                        worker.launcher.recoverer.tick)
            worker.fetch()
        storage.resume_queue("b")
        worker.fetch()
        records = {label: _normalized(storage.get_job(job_id)) for label, job_id in ids.items()}
        status = storage.get_batch(batch.id)
        assert status is not None
        counts = {state: n for state, n in status.counts.items() if n}  # zeros are optional
        records["batch"] = {"counts": counts, "complete": status.complete}
        return records
    finally:
        bodies.release_all()
        worker.stop()
        worker.close()


def test_the_same_scenario_leaves_the_same_record_on_every_backend(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Memory, SQLite, Redis and Redis Cluster tell each job's story identically."""
    results: dict[str, dict[str, Any]] = {}
    for backend in BACKENDS:
        clock = FakeClock()
        (tmp_path / backend).mkdir()
        storage = store_factory(backend, tmp_path / backend, request)(clock)
        try:
            results[backend] = run_scenario(storage, clock)
        finally:
            storage.close()
    reference = results["memory"]
    # The story itself, as the lifecycle rules tell it (docs/api.md).
    states = {label: r["state"] for label, r in reference.items() if label != "batch"}
    assert states == {
        "success": "succeeded", "logs": "succeeded", "async": "succeeded", "fail": "failed",
        "error-then-success": "succeeded", "error-until-dead": "dead",
        "timeout-then-success": "succeeded", "cancel-while-waiting": "cancelled",
        "cancel-while-running": "cancelled", "retry-by-hand": "succeeded",
        "batch-success": "succeeded", "batch-dead": "dead",
    }
    for backend, records in results.items():
        for label in reference:
            assert records[label] == reference[label], (
                f"{backend} differs from memory for {label!r}:\n"
                f"{json.dumps(records[label], indent=1, default=str)}\n"
                f"memory:\n{json.dumps(reference[label], indent=1, default=str)}")
