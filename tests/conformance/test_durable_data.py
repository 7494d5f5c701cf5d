"""A durable job's data under the app's job-data rules, on every store (docs/durable.md, "Job
data"; docs/job-data.md): a sealed job's step results, its steps' errors and its loop's
cursor, and the data of the events and messages sent to it, never reach the store in clear
(its records, its event log, its message), open again in the job, and open for a reader who
holds the key; a large step result goes by reference, is read back whole on a replay, and the
sweep keeps its blob while the job lives.

Expectations: DBOS and Temporal replay a step's recorded output (a replay must see the same
value); Temporal's payload codecs encrypt activity results and signal payloads as they encrypt
workflow inputs (a codec applies to every payload the server stores), and trigger.dev
offloads large outputs of any run behind a reference.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from conveyor import Conveyor, JobState, Keys, Offload, StepFailed
from conveyor.blobs import MemoryBlobs
from conveyor.client.context import current_job
from conveyor.core.clock import FakeClock
from conveyor.storage import Backend
from conveyor.testing import drain
from conveyor.views.records import job_detail
from conveyor.worker.blob_sweep import sweep

SECRET = "card-4242-4242"
KEYS = Keys({"k1": Keys.generate()})


def _declined(card: str) -> None:
    raise ValueError(f"declined {card}")


def _sealed_app(backend: Backend, clock: FakeClock, looped: list[str] | None = None
                ) -> Conveyor:
    app = Conveyor(storage=backend, clock=clock, encrypt=KEYS)

    @app.job(name="dd.order", retry=0)
    def order(card: str) -> dict[str, Any]:
        ctx = current_job()
        receipt = ctx.step("charge", lambda: {"receipt": card[::-1]})
        paid = ctx.wait_for("paid", "o1", timeout=60)
        note = ctx.receive("note", timeout=60)
        for item in ctx.iterate([card, card + "!"], every=1):  # a replay skips it once done
            (looped if looped is not None else []).append(item)
        try:
            ctx.step("mail", _declined, card, retries=1, retry_in=0)
        except StepFailed as exc:
            failed = str(exc)
        return {"receipt": receipt, "paid": paid, "note": note, "failed": failed}

    return app


def _run(app: Conveyor, job_id: str) -> JobState:
    for _ in range(10):
        drain(app)
        record = app.get_job(job_id)
        assert record is not None
        if record.state is not JobState.SCHEDULED:
            return record.state
    raise AssertionError("the job never finished")


def _stored(backend: Backend, job_id: str) -> str:
    """Everything the store gives of a job and its durable records, as text."""
    record = backend.get_job(job_id)
    assert record is not None
    history = backend.durable.read(job_id)
    return json.dumps([record.payload, record.result, record.message,
                       [e.as_dict() for e in record.events or ()],
                       [(s.result, s.error) for s in history.steps],
                       history.wait.as_dict() if history.wait else None])


def test_a_sealed_jobs_steps_events_and_messages_never_reach_the_store_in_clear(
        backend: Backend, clock: FakeClock) -> None:
    """Temporal's codec encrypts every payload the server keeps, signals and activity results
    alike: here a step's result and error, a loop's cursor, an event's and a message's data.
    The job itself gets each value back in clear on every replay (DBOS, Temporal)."""
    looped: list[str] = []
    app = _sealed_app(backend, clock, looped)
    ref = app.registry.get("dd.order").enqueue(SECRET)  # type: ignore[union-attr]
    drain(app)
    assert app.send_event("paid", "o1", {"card": SECRET}) == 1
    drain(app)
    assert app.send(ref.id, "note", f"for {SECRET}") is True
    assert _run(app, ref.id) is JobState.SUCCEEDED
    assert ref.result(timeout=5) == {
        "receipt": {"receipt": SECRET[::-1]}, "paid": {"card": SECRET},
        "note": f"for {SECRET}", "failed": f"step mail failed: ValueError: declined {SECRET}"}
    assert looped == [SECRET, SECRET + "!"]
    stored = _stored(backend, ref.id)
    assert SECRET not in stored and SECRET[::-1] not in stored
    # the stores' own summary of what a wait received (Lua, SQL, Python) says so
    waits = {e.data["name"]: e.data["summary"] for e in app.get_job(ref.id).events or ()
             if e.kind == "step" and e.data}
    assert waits["wait:paid"] == "encrypted" and waits["receive:note"] == "encrypted"
    assert waits["charge"] == "encrypted"


def test_a_reader_sees_sealed_steps_with_the_key_and_encrypted_without(
        backend: Backend, clock: FakeClock) -> None:
    """Sidekiq Enterprise's and Oban Pro's dashboards show encrypted arguments as such; the
    reader holding the key (the app's dashboard, ``--app``) reads them (docs/job-data.md)."""
    app = _sealed_app(backend, clock)
    ref = app.registry.get("dd.order").enqueue(SECRET)  # type: ignore[union-attr]
    drain(app)
    app.send_event("paid", "o1", {"card": SECRET})
    drain(app)
    app.send(ref.id, "note", SECRET)
    _run(app, ref.id)
    blind = {s["name"]: s["summary"] for s in job_detail(backend, ref.id)["durable"]["steps"]}
    assert blind["charge"] == "encrypted" and blind["wait:paid"] == "encrypted"
    assert SECRET not in json.dumps(blind)
    assert blind["mail"] == "ValueError: encrypted"
    seen = {s["name"]: s["summary"]
            for s in job_detail(backend, ref.id, app.data)["durable"]["steps"]}
    assert seen["charge"] == json.dumps({"receipt": SECRET[::-1]})
    assert seen["wait:paid"] == json.dumps({"card": SECRET})
    assert seen["mail"] == f"ValueError: declined {SECRET}"


def test_a_large_step_result_goes_by_reference_and_its_blob_lives_with_its_job(
        backend: Backend, clock: FakeClock) -> None:
    """trigger.dev keeps a large output behind a reference; a replay reads it back whole
    (DBOS: a recorded step returns its stored output). The sweep weighs a step's blob
    against the job's step records: kept while the job lives, collected once it is gone."""
    store = MemoryBlobs(f"memory://{uuid.uuid4().hex}")
    app = Conveyor(storage=backend, clock=clock, max_payload=8 * 1024,
                   offload=Offload(store=store, threshold=1024, grace=60))
    big = "é" + "x" * 50_000

    @app.job(name="dd.fetch")
    def fetch() -> int:
        ctx = current_job()
        page = ctx.step("fetch", lambda: big)
        ctx.sleep(10)
        return len(page) if page == big else -1

    ref = fetch.enqueue()
    drain(app)
    [step] = backend.durable.read(ref.id).steps[:1]
    assert step.result is not None and len(step.result) < 1024 and big not in step.result
    assert [k.split(".")[1] for k in store.held()] == ["s"]
    read = backend.durable.read
    assert sweep(app.data, backend.get_job, now=10**10, steps=read) == 0
    assert sweep(app.data, backend.get_job, now=10**10) == 0  # not weighed: never deleted
    assert job_detail(backend, ref.id)["durable"]["steps"][0]["summary"] == \
        f"by reference, {len(big.encode()) + 2:,} bytes"
    clock.advance(10)
    assert _run(app, ref.id) is JobState.SUCCEEDED
    assert ref.result(timeout=5) == len(big)
    backend.delete_jobs([ref.id])
    assert sweep(app.data, backend.get_job, now=10**10, steps=read) == 1
    assert store.held() == []
