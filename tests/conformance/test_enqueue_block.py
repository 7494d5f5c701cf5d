"""``Storage.enqueue_block``: jobs given as columns are stored exactly as the same jobs given
one by one to ``Storage.enqueue`` (the client's vectorised bulk path relies on it).

Each test stores a reference set one spec per call in one queue and the same jobs as a block
in another, then compares the records with ids and queue names taken out.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, EnqueueResult, FlowControl, JobRecord, JobSpec
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.storage import Backend
from conveyor.storage.blocks import JobBlock
from tests.conformance.helpers import new_job_id, take


def _payloads(n: int) -> list[str]:
    return [json.dumps({"a": [i, "x\u00e9"], "k": {}}, separators=(",", ":")) for i in range(n)]


def _block(queue: str, payloads: list[str], **shared: Any) -> JobBlock:
    return JobBlock(name="tests.bulk", queue=queue, ids=[new_job_id("b") for _ in payloads],
                    payloads=payloads, **shared)


def _one_by_one(store: Backend, block: JobBlock, queue: str) -> list[EnqueueResult]:
    """The reference: the block's jobs under fresh ids in ``queue``, one call per job."""
    out: list[EnqueueResult] = []
    for spec in block.specs():
        out += store.enqueue([dataclasses.replace(spec, id=new_job_id("o"), queue=queue)])
    return out


def _normal(record: JobRecord | None) -> dict[str, Any]:
    assert record is not None
    out = dataclasses.asdict(record)
    del out["id"], out["queue"]
    return out


def _same_records(store: Backend, left: list[EnqueueResult], right: list[EnqueueResult]) -> None:
    assert [r.created for r in left] == [r.created for r in right]
    for a, b in zip(left, right, strict=True):
        assert _normal(store.get_job(a.id)) == _normal(store.get_job(b.id))


def test_a_block_stores_what_one_by_one_enqueues_store(backend: Backend) -> None:
    block = _block("bulk", _payloads(5), max_retries=3, timeout=12.5,
                   deadline=backend.now() + 60)
    bulk = backend.enqueue_block(block)
    assert [r.id for r in bulk] == list(block.ids) and all(r.created for r in bulk)
    _same_records(backend, _one_by_one(backend, block, "each"), bulk)
    # Pending in the order given, exactly like the reference queue.
    assert [j.id for j in take(backend, ["bulk"], count=10)] == list(block.ids)


def test_a_scheduled_block_waits_like_scheduled_jobs(backend: Backend, clock: FakeClock) -> None:
    block = _block("bulk", _payloads(3), run_at=clock.now() + 30)
    bulk = backend.enqueue_block(block)
    _same_records(backend, _one_by_one(backend, block, "each"), bulk)
    assert take(backend, ["bulk"], count=10) == []
    clock.advance(31)
    backend.promote_due()
    assert sorted(j.id for j in take(backend, ["bulk"], count=10)) == sorted(block.ids)


def test_ids_that_exist_are_not_stored_again(backend: Backend) -> None:
    first = _block("bulk", _payloads(2))
    backend.enqueue_block(first)
    before = [_normal(backend.get_job(i)) for i in first.ids]
    again = dataclasses.replace(
        first, ids=[first.ids[0], "fresh" + first.ids[1], "fresh" + first.ids[1]],
        payloads=_payloads(3)[::-1])
    results = backend.enqueue_block(again)
    assert [(r.id, r.created) for r in results] == [
        (first.ids[0], False), ("fresh" + first.ids[1], True), ("fresh" + first.ids[1], False)]
    assert [_normal(backend.get_job(i)) for i in first.ids] == before


def test_unique_jobs_in_a_block_behave_as_one_by_one(backend: Backend) -> None:
    flows = [FlowControl(unique_key=key, unique_for=60.0) for key in ("k1", "k2", "k1", "k3")]
    block = _block("bulk", _payloads(4), flows=flows)
    # The same keys are taken by the reference jobs first, so use keys of their own there.
    reference = dataclasses.replace(
        block, flows=[FlowControl(unique_key="o" + f.unique_key, unique_for=60.0)  # type: ignore[operator]
                      for f in flows])
    each = _one_by_one(backend, reference, "each")
    bulk = backend.enqueue_block(block)
    assert [r.created for r in bulk] == [True, True, False, True]
    assert bulk[2].id == bulk[0].id and each[2].id == each[0].id
    for a, b in zip(each, bulk, strict=True):
        left, right = _normal(backend.get_job(a.id)), _normal(backend.get_job(b.id))
        assert left.pop("flow")["unique_key"] == "o" + right.pop("flow")["unique_key"]
        assert left == right


def test_a_block_joins_its_batch(backend: Backend) -> None:
    backend.create_batch(BatchSpec(id="bb", description="bulk"))
    backend.create_batch(BatchSpec(id="bo", description="each"))
    block = _block("bulk", _payloads(4), batch_id="bb")
    each = _one_by_one(backend, dataclasses.replace(block, batch_id="bo"), "each")
    bulk = backend.enqueue_block(block)
    for a, b in zip(each, bulk, strict=True):
        left, right = _normal(backend.get_job(a.id)), _normal(backend.get_job(b.id))
        assert (left.pop("batch_id"), right.pop("batch_id")) == ("bo", "bb")
        assert left == right
    bulk_status, each_status = backend.get_batch("bb"), backend.get_batch("bo")
    assert bulk_status is not None and each_status is not None
    assert (bulk_status.total, bulk_status.counts) == (4, each_status.counts)
    backend.close_batch("bb")
    status = backend.get_batch("bb")
    assert status is not None and not status.complete  # its members are still pending


def test_a_block_for_a_missing_or_finished_batch_raises(backend: Backend) -> None:
    with pytest.raises(BatchNotFound):
        backend.enqueue_block(_block("bulk", _payloads(2), batch_id="nope"))
    backend.create_batch(BatchSpec(id="done"))
    backend.close_batch("done")
    with pytest.raises(BatchClosedError):
        backend.enqueue_block(_block("bulk", _payloads(2), batch_id="done"))
    assert backend.count_jobs(queue="bulk") == 0


def test_a_large_block_is_stored_whole(backend: Backend) -> None:
    n = 4_500  # more than one chunk of every backend
    block = _block("bulk", [f'{{"a":[{i}],"k":{{}}}}' for i in range(n)])
    results = backend.enqueue_block(block)
    assert len(results) == n and all(r.created for r in results)
    assert backend.count_jobs(queue="bulk") == n
    assert [j.id for j in take(backend, ["bulk"], count=3)] == list(block.ids[:3])


def test_an_empty_block_stores_nothing(backend: Backend) -> None:
    assert backend.enqueue_block(_block("bulk", [])) == []


def test_specs_of_a_block_are_its_jobs() -> None:
    flow = FlowControl(unique_key="u")
    block = JobBlock(name="n", queue="q", ids=["a", "b"], payloads=["{}", "[]"],
                     max_retries=2, timeout=1.0, deadline=5.0, run_at=3.0, batch_id="x",
                     flows=[flow, None])
    assert block.specs() == [
        JobSpec(id="a", name="n", queue="q", payload="{}", max_retries=2, timeout=1.0,
                deadline=5.0, run_at=3.0, batch_id="x", flow=flow),
        JobSpec(id="b", name="n", queue="q", payload="[]", max_retries=2, timeout=1.0,
                deadline=5.0, run_at=3.0, batch_id="x", flow=None),
    ]
    assert len(block) == 2


def test_ids_out_of_order_are_stored_as_given(backend: Backend) -> None:
    block = _block("bulk", _payloads(4))
    block = dataclasses.replace(block, ids=list(reversed(block.ids)))
    results = backend.enqueue_block(block)
    assert [(r.id, r.created) for r in results] == [(i, True) for i in block.ids]
    assert [j.id for j in take(backend, ["bulk"], count=10)] == list(block.ids)


def test_a_block_joining_a_batch_again_counts_each_job_once(backend: Backend) -> None:
    backend.create_batch(BatchSpec(id="again"))
    first = _block("bulk", _payloads(3), batch_id="again")
    backend.enqueue_block(first)
    # Ids below the batch's last one, ids it holds, and one id twice: no job counted twice.
    twice = "0" + first.ids[0]
    earlier = dataclasses.replace(first, ids=[twice, *first.ids[1:], twice], payloads=_payloads(4))
    results = backend.enqueue_block(earlier)
    assert [r.created for r in results] == [True, False, False, False]
    status = backend.get_batch("again")
    assert status is not None and status.total == 4
    assert status.counts.get("pending") == 4
    later = _block("bulk", _payloads(2), batch_id="again")  # after every id it holds
    backend.enqueue_block(later)
    status = backend.get_batch("again")
    assert status is not None and (status.total, status.counts.get("pending")) == (6, 6)
    assert backend.count_jobs(batch_id="again") == 6
    # Ids of other shapes (above the last hex id, or not) are looked up, never assumed new.
    odd = dataclasses.replace(later, ids=["~job-1", "~job-2", later.ids[0]], payloads=_payloads(3))
    assert [r.created for r in backend.enqueue_block(odd)] == [True, True, False]
    again = dataclasses.replace(later, ids=["~job-2", "~job-3"], payloads=_payloads(2))
    assert [r.created for r in backend.enqueue_block(again)] == [False, True]
    status = backend.get_batch("again")
    assert status is not None and (status.total, status.counts.get("pending")) == (9, 9)
    # Pages read every member once.
    paged = [r.id for o in (0, 5) for r in backend.list_jobs(batch_id="again", offset=o, limit=5)]
    assert sorted(paged) == sorted({*first.ids, twice, *later.ids, "~job-1", "~job-2", "~job-3"})


def test_payload_text_is_stored_exactly(backend: Backend) -> None:
    texts = ['{"a":["x\\u0000y"],"k":{}}', '{"a":["q\\"b\\\\s/\\t"],"k":{}}',
             '{"a":["\u00e9\u4e2d\U0001f600"],"k":{}}', '{"a":[],"k":{"n":null}}']
    for payloads in ([t] for t in texts):  # each alone: one odd text must not hide another
        block = _block("bulk", payloads)
        bulk = backend.enqueue_block(block)
        _same_records(backend, _one_by_one(backend, block, "each"), bulk)
        record = backend.get_job(bulk[0].id)
        assert record is not None and record.payload == payloads[0]
    block = _block("bulk", texts)
    assert [backend.get_job(r.id).payload for r in backend.enqueue_block(block)] == texts  # type: ignore[union-attr]
