"""``Inspector.job_heads``: what a search reads of jobs, the same on every store and bounded
whatever the jobs hold (issue 49: a search decoded up to 5,000 whole payloads).

Expectation from Sidekiq's web UI, whose search (``Sidekiq::SortedSet#scan``) matches a
pattern against each entry's stored text page by page rather than loading jobs: a search
reads a cut of each job, never the job whole.
"""

from __future__ import annotations

import json

from conveyor.core.clock import FakeClock
from conveyor.core.job import JobSpec, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import ack, new_job_id, take_one


def _put(backend: Backend, queue: str, args: list[object], clock: FakeClock) -> str:
    clock.advance(1)  # distinct creation times: newest first is the same order everywhere
    payload = json.dumps({"a": args, "k": {"note": "x"}}, ensure_ascii=False,
                         separators=(",", ":"))
    job_id = new_job_id()
    assert backend.enqueue([JobSpec(id=job_id, name="shop.row", queue=queue,
                                    payload=payload)])[0].created
    return job_id


def test_heads_page_as_the_newest_first_list_and_cut_each_job(backend: Backend,
                                                               clock: FakeClock) -> None:
    big = "SKU-" + "z" * 50_000 + "-TAIL"
    ids = [_put(backend, "imports", [n, "Zürich", "quote\"and\\back"], clock)
           for n in range(4)]
    ids.append(_put(backend, "imports", [big], clock))
    ids.append(_put(backend, "exports", ["ünïcode ✓ 𝄞"], clock))
    failed = take_one(backend, ["imports"])
    assert failed.id == ids[0]
    reason = "warehouse closed: " + "é" * 5_000
    assert ack(backend, failed, Outcome.FAILED, message=reason)
    chars = 100
    for state, queue in ((None, None), (None, "imports"), (JobState.PENDING, "imports"),
                         (JobState.PENDING, None), (JobState.FAILED, None)):
        listed = backend.list_jobs(state=state, queue=queue, limit=100, newest_first=True)
        for offset, limit in ((0, 100), (1, 2), (3, 10)):
            heads = backend.job_heads(state=state, queue=queue, offset=offset, limit=limit,
                                      chars=chars)
            page = listed[offset:offset + limit]
            assert [h.id for h in heads] == [r.id for r in page], (state, queue, offset)
            for head, record in zip(heads, page, strict=True):
                assert (head.name, head.queue, head.state) == (record.name, record.queue,
                                                               record.state)
                assert head.created_at == record.created_at
                assert head.payload == record.payload[:chars]  # the stored text, cut
                assert head.message == (record.message or "")[:chars]
    [dead_head] = backend.job_heads(state=JobState.FAILED, chars=chars)
    assert dead_head.message == reason[:chars]
    [long_one] = [h for h in backend.job_heads(chars=chars) if h.id == ids[4]]
    assert len(long_one.payload) == chars and "TAIL" not in long_one.payload
    assert backend.job_heads(queue="nowhere") == []
    assert backend.job_heads(limit=0) == []
