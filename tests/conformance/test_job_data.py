"""Job data on every store (docs/job-data.md): sealed arguments, results, messages and log
lines never reach the store in clear, and open again where a key is held; a job whose key is
missing or whose blob is gone ends dead alone, in one line; large arguments and results go by
reference and come back whole, a fan-in node's parents' results included; blobs no job
references are collected after their grace.

Expectations: Sidekiq Enterprise's and Oban Pro's encryption (arguments unreadable in the
store and the dashboard, decrypted in the worker), Temporal's payload codecs (a payload the
worker cannot decode fails that workflow task alone), trigger.dev's payload offloading
(large payloads stored elsewhere behind a reference, read back transparently).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from conveyor import Conveyor, JobState, Keys, Offload
from conveyor.blobs import MemoryBlobs
from conveyor.client.context import current_job
from conveyor.core.clock import FakeClock
from conveyor.errors import PayloadError, UnsealError
from conveyor.storage import Backend
from conveyor.storage.stored_data import StoredData
from conveyor.testing import drain
from conveyor.views.reseal import reseal_jobs
from conveyor.worker.blob_sweep import sweep

SECRET = "card-4242-4242"
K1, K2 = Keys.generate(), Keys.generate()


def make(backend: Backend, clock: FakeClock, **options: Any) -> Conveyor:
    app = Conveyor(storage=backend, clock=clock, **options)

    @app.job(name="data.charge", retry=1)
    def charge(card: str, note: str = "") -> dict[str, str]:
        current_job().log(f"charging {card}", card=card)
        if current_job().attempt == 1:
            raise ValueError(f"declined {card}")
        return {"receipt": card[::-1], "note": note}

    @app.job(name="data.plain")
    def plain(value: Any) -> Any:
        return value

    @app.job(name="data.big")
    def big(blob: str, times: int = 1) -> str:
        return blob * times

    @app.job(name="data.count")
    def count(results: list[Any]) -> list[int]:
        return [len(r) for r in results]

    return app


def stored_text(backend: Backend, job_id: str) -> str:
    """Everything the store holds of a job, as text."""
    record = backend.get_job(job_id)
    assert record is not None
    heads = backend.job_heads(offset=0, limit=100, chars=10_000)
    return json.dumps([record.payload, record.result, record.message,
                       [e.as_dict() for e in record.events or ()],
                       [(h.payload, h.message) for h in heads if h.id == job_id]])


def test_sealed_data_never_reaches_the_store_in_clear_and_opens_with_the_key(
        backend: Backend, clock: FakeClock) -> None:
    app = make(backend, clock, encrypt=Keys({"k1": K1}))
    ref = app.registry.get("data.charge").enqueue(SECRET, note=SECRET)  # type: ignore[union-attr]
    drain(app)
    clock.advance(3600)
    drain(app)
    assert ref.result(timeout=5) == {"receipt": SECRET[::-1], "note": SECRET}
    text = stored_text(backend, ref.id)
    assert SECRET not in text and SECRET[::-1] not in text and "declined" not in text
    # the app holds the key: its errors and log lines read in clear
    record = app.get_job(ref.id)
    assert record is not None and record.state is JobState.SUCCEEDED
    errors = [e for e in record.events or () if e.kind == "error"]
    assert errors and errors[0].message == f"ValueError: declined {SECRET}"
    assert errors[0].data is not None and SECRET in errors[0].data["traceback"]
    logs = [e for e in record.events or () if e.kind == "message"]
    assert logs[0].message == f"charging {SECRET}" and logs[0].data == {"card": SECRET}


def test_a_job_sealed_with_a_key_the_worker_lacks_ends_dead_naming_it_alone(
        backend: Backend, clock: FakeClock) -> None:
    client = make(backend, clock, encrypt=Keys({"k1": K1}, jobs=["data.charge"]))
    sealed = client.registry.get("data.charge").enqueue(SECRET)  # type: ignore[union-attr]
    plain = client.registry.get("data.plain").enqueue([1, 2])  # type: ignore[union-attr]
    worker = make(backend, clock, encrypt=Keys({"k2": K2}, jobs=["data.charge"]))  # no k1
    drain(worker)
    record = backend.get_job(sealed.id)
    assert record is not None and record.state is JobState.DEAD
    assert record.message is not None and "'k1'" in record.message
    assert "\n" not in record.message and SECRET not in record.message
    assert plain.result(timeout=5) == [1, 2]


def test_keys_rotate_the_newest_seals_and_every_one_opens(backend: Backend,
                                                          clock: FakeClock) -> None:
    old = make(backend, clock, encrypt=Keys({"k1": K1}))
    ref = old.registry.get("data.plain").enqueue(SECRET)  # type: ignore[union-attr]
    rotated = make(backend, clock, encrypt=Keys({"k1": K1, "k2": K2}))
    drain(rotated)
    record = backend.get_job(ref.id)
    assert record is not None and record.result is not None
    assert json.loads(record.result)["$conveyor"]["e"] == "k2"  # sealed with the newest
    assert json.loads(record.payload)["x"]["e"] == "k1"
    assert rotated.client.result_of(record) == SECRET
    with pytest.raises(UnsealError, match="'k2'"):
        ref.result(timeout=5)  # the old app (its ref) cannot read what k2 sealed


def offloaded(backend: Backend, clock: FakeClock, **options: Any) -> tuple[Conveyor, MemoryBlobs]:
    store = MemoryBlobs(f"memory://{uuid.uuid4().hex}")
    return make(backend, clock, offload=Offload(store=store, threshold=1024, grace=60),
                max_payload=8 * 1024, **options), store


def test_large_arguments_and_results_go_by_reference_and_come_back_whole(
        backend: Backend, clock: FakeClock) -> None:
    app, store = offloaded(backend, clock)
    blob = "é" + "x" * 200_000  # far over max_payload: only the reference stays inline
    ref = app.registry.get("data.big").enqueue(blob, times=2)  # type: ignore[union-attr]
    record = backend.get_job(ref.id)
    assert record is not None and len(record.payload) < 1024 and blob not in record.payload
    drain(app)
    assert ref.result(timeout=5) == blob * 2
    record = backend.get_job(ref.id)
    assert record is not None and record.result is not None and len(record.result) < 1024
    assert len(store.held()) == 2  # the arguments' blob and the result's


def test_sealed_and_by_reference_together_the_blob_store_sees_no_clear_text(
        backend: Backend, clock: FakeClock) -> None:
    app, store = offloaded(backend, clock, encrypt=Keys({"k1": K1}))
    ref = app.registry.get("data.big").enqueue(SECRET * 1000)  # type: ignore[union-attr]
    drain(app)
    assert ref.result(timeout=5) == SECRET * 1000
    assert all(SECRET.encode() not in (store.get(k) or b"") for k in store.held())


def test_without_offload_the_size_rule_still_refuses_large_arguments(
        backend: Backend, clock: FakeClock) -> None:
    app = make(backend, clock, max_payload=8 * 1024)
    with pytest.raises(PayloadError, match="over the limit"):
        app.registry.get("data.big").enqueue("x" * 10_000)  # type: ignore[union-attr]


def test_a_job_whose_blob_is_missing_ends_dead_in_one_line_and_others_run(
        backend: Backend, clock: FakeClock) -> None:
    app, store = offloaded(backend, clock)
    lost = app.registry.get("data.big").enqueue("y" * 5000)  # type: ignore[union-attr]
    [key] = store.held()
    store.delete([key])
    fine = app.registry.get("data.big").enqueue("z" * 5000)  # type: ignore[union-attr]
    drain(app)
    record = backend.get_job(lost.id)
    assert record is not None and record.state is JobState.DEAD
    assert record.message is not None and key in record.message and "\n" not in record.message
    assert fine.result(timeout=5) == "z" * 5000


def test_a_fan_in_node_receives_its_parents_large_results_by_reference(
        backend: Backend, clock: FakeClock) -> None:
    """Two parents of 6 KB each would make the node's arguments 12 KB, over max_payload
    (8 KB, docs/workflows.md's size rule); by reference the node's inline arguments stay
    small and it reads both whole."""
    app, _ = offloaded(backend, clock)
    big = app.registry.get("data.big")
    wf = app.workflow()
    parents = [wf.add(big.s(c * 6000)) for c in "ab"]  # type: ignore[union-attr]
    node = wf.add(app.registry.get("data.count").s(), after=parents,  # type: ignore[union-attr]
                  results=True)
    wf.enqueue()
    drain(app)
    assert node.result(timeout=5) == [6000, 6000]
    record = backend.get_job(node.id)
    assert record is not None and len(record.payload) < 2048


def test_the_sweep_deletes_blobs_no_job_references_once_past_their_grace(
        backend: Backend, clock: FakeClock) -> None:
    app, store = offloaded(backend, clock)
    big = app.registry.get("data.big")
    kept = big.enqueue("k" * 5000)  # type: ignore[union-attr]
    gone = big.enqueue("g" * 5000)  # type: ignore[union-attr]
    backend.delete_jobs([gone.id])
    store.put(f"{uuid.uuid4().hex[:24]}.p.{uuid.uuid4().hex[:12]}", b"an enqueue that failed")
    assert len(store.held()) == 3
    assert sweep(app.data, backend.get_job) == 0  # all younger than the grace
    assert sweep(app.data, backend.get_job, now=10**10) == 2
    [left] = store.held()
    assert left.startswith(kept.id)
    drain(app)
    assert kept.result(timeout=5) == "k" * 5000


def test_reseal_is_a_compare_and_set_of_payload_result_and_message(backend: Backend,
                                                                   clock: FakeClock) -> None:
    """``Inspector.reseal`` writes only over what the caller read: a job that moved since
    keeps what it has."""
    app = make(backend, clock)
    ref = app.registry.get("data.plain").enqueue("v")  # type: ignore[union-attr]
    record = backend.get_job(ref.id)
    assert record is not None
    old = StoredData(record.payload, record.result, record.message)
    new = StoredData('{"a":["w"],"k":{}}', None, "sealed again")
    assert not backend.reseal(ref.id, StoredData("{}", None, None), new)
    assert backend.reseal(ref.id, old, new)
    assert not backend.reseal(ref.id, old, new)  # what it read is gone
    assert not backend.reseal("0" * 24, old, new)
    drain(app)
    assert ref.result(timeout=5) == "w"


def test_reencrypt_seals_stored_jobs_with_the_newest_key_so_the_old_can_go(
        backend: Backend, clock: FakeClock) -> None:
    store = MemoryBlobs(f"memory://{uuid.uuid4().hex}")
    offload = Offload(store=store, threshold=1024, grace=60)
    old = make(backend, clock, encrypt=Keys({"k1": K1}), offload=offload)
    small = old.registry.get("data.plain").enqueue(SECRET)  # type: ignore[union-attr]
    large = old.registry.get("data.big").enqueue(SECRET * 200)  # type: ignore[union-attr]
    rotated = make(backend, clock, encrypt=Keys({"k1": K1, "k2": K2}), offload=offload)
    done = reseal_jobs(backend, rotated.data)
    assert (done.read, done.resealed, done.changed, done.failed) == (2, 2, 0, 0)
    assert reseal_jobs(backend, rotated.data).resealed == 0  # nothing left to do
    only_new = make(backend, clock, encrypt=Keys({"k2": K2}), offload=offload)
    drain(only_new)
    assert only_new.client.result_of(backend.get_job(small.id)) == SECRET  # type: ignore[arg-type]
    assert only_new.client.result_of(backend.get_job(large.id)) == SECRET * 200  # type: ignore[arg-type]
    assert sweep(only_new.data, backend.get_job, now=10**10) == 1  # the k1 blob, replaced


def test_asyncio_enqueue_and_result_work_by_reference(backend: Backend, clock: FakeClock) -> None:
    """``aenqueue`` and ``aresult`` of data by reference: the blob store's blocking reads
    and writes run in a thread, and the value is whole."""
    import asyncio

    app, _ = offloaded(backend, clock)
    big = app.registry.get("data.big")
    ref = asyncio.run(big.aenqueue("q" * 5000))  # type: ignore[union-attr]
    drain(app)
    assert asyncio.run(ref.aresult(timeout=5)) == "q" * 5000  # type: ignore[union-attr]
