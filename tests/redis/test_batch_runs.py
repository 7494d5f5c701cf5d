"""A bulk join kept as runs (``lua/_runs.lua``): one entry per run of ids instead of three per
job, with counters, callbacks, pages by state and replays exactly as if every job had been
indexed when it joined; deleting and trimming the batch; a damaged run entry."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.core.ids import new_id, new_ids
from conveyor.core.job import ALL_STATES, Ack, BatchSpec, JobSpec, JobState, Outcome
from conveyor.storage.blocks import JobBlock
from conveyor.storage.redis import batches
from conveyor.storage.redis.batches import id_runs
from conveyor.storage.redis.storage import RedisStorage, open_redis
from conveyor.storage.retention import Retention
from tests.redis.conftest import prefixed

pytestmark = pytest.mark.redis


@pytest.fixture(params=["redis", "cluster"])
def runs_store(request: pytest.FixtureRequest) -> Iterator[RedisStorage]:
    """A storage on the session's single server, then on its Cluster."""
    server: Any = request.getfixturevalue(
        "redis_server" if request.param == "redis" else "redis_cluster")
    storage = open_redis(prefixed(server.url))
    yield storage
    storage.close()


def _block(batch: str, queue: str, n: int, **shared: Any) -> JobBlock:
    return JobBlock(name="t", queue=queue, ids=new_ids(n), payloads=["[]"] * n,
                    batch_id=batch, max_retries=0, **shared)


def _batch(store: RedisStorage, callbacks: dict[str, JobSpec] | None = None) -> str:
    """Three runs (q1, q2, q1) around a job that joined one by one, and a scheduled run."""
    batch = new_id()
    store.create_batch(BatchSpec(id=batch, callbacks=callbacks or {}))
    store.enqueue_block(_block(batch, "q1", 40))
    store.enqueue([JobSpec(id=new_id(), name="t", queue="q2", payload="[]", batch_id=batch)])
    store.enqueue_block(_block(batch, "q2", 40))
    store.enqueue_block(_block(batch, "q1", 40))
    store.enqueue_block(_block(batch, "q2", 10, run_at=store.now() + 3600))
    store.close_batch(batch)
    return batch


def _one_run(store: RedisStorage, n: int) -> tuple[str, JobBlock]:
    batch = new_id()
    store.create_batch(BatchSpec(id=batch))
    block = _block(batch, "q1", n)
    store.enqueue_block(block)
    return batch, block


def _truth(store: RedisStorage, ids: list[str]) -> dict[str, tuple[str, str]]:
    """Each job's state and queue, read from the jobs themselves."""
    out = {}
    for job_id in ids:
        record = store.get_job(job_id)
        if record is not None:
            out[job_id] = (record.state.value, record.queue)
    return out


def _check_pages(store: RedisStorage, batch: str, truth: dict[str, tuple[str, str]],
                 queues: tuple[str | None, ...] = (None, "q2")) -> None:
    status = store.get_batch(batch)
    assert status is not None and status.total == len(truth)
    want_counts: dict[str, int] = {}
    for state, _ in truth.values():
        want_counts[state] = want_counts.get(state, 0) + 1
    assert status.counts == want_counts
    for state in (None, *ALL_STATES):
        for queue in queues:
            want = sorted(i for i, (s, q) in truth.items()
                          if (state is None or s == state.value) and (queue is None or q == queue))
            assert store.count_jobs(state=state, queue=queue, batch_id=batch) == len(want)
            for offset in (0, 7, 38, 95):
                got = [r.id for r in store.list_jobs(state=state, queue=queue, batch_id=batch,
                                                     offset=offset, limit=9)]
                assert got == want[offset:offset + 9], (state, queue, offset)


def _members(store: RedisStorage, batch: str) -> list[str]:
    return sorted(job_id for step in store._pages.batch_members(batch) for job_id, _, _ in step)


def test_a_bulk_join_keeps_one_entry_per_run(runs_store: RedisStorage) -> None:
    store = runs_store
    batch = _batch(store)
    bk = store.keys.batch(batch)
    assert store.link.call("ZCARD", bk.heads) == 4 and store.link.call("HLEN", bk.runs) == 4
    assert store.link.call("HLEN", bk.jobs) == 1  # the job that joined one by one
    status = store.get_batch(batch)
    assert status is not None and status.total == 131
    assert status.counts == {"pending": 121, "scheduled": 10}
    # Once every job of a run has its own entry, the run is dropped: the first run's 40
    # jobs are the first 40 of q1, so no reader ever has to index them.
    assert len(store.dequeue(["q1"], "w", 40, 60.0)) == 40
    assert store.link.call("ZCARD", bk.heads) == 3 and store.link.call("HLEN", bk.runs) == 3
    assert store.link.call("ZCARD", bk.order) == 41  # with the job that joined by itself


def test_pages_by_state_after_some_jobs_moved(runs_store: RedisStorage) -> None:
    store = runs_store
    batch = _batch(store)
    ids = sorted(job_id for q in ("q1", "q2") for job_id in _queue_ids(store, q))
    jobs = store.dequeue(["q1", "q2"], "w", 30, 60.0)
    outcomes = [Outcome.SUCCEEDED] * 12 + [Outcome.FAILED] * 6 + [Outcome.DEAD] * 2
    assert all(store.ack([Ack(j.id, j.token, o) for j, o in zip(jobs, outcomes, strict=False)]))
    failed = [j.id for j in jobs[12:18]]
    assert store.retry_jobs(failed[:2]) == 2  # retried by hand: pending again
    assert store.delete_jobs(failed[2:3]) == 1
    pending = [i for i in ids if i not in {j.id for j in jobs}]
    assert store.kill_jobs(pending[-3:]) == 3
    assert store.delete_jobs(pending[5:7]) == 2
    truth = _truth(store, ids)
    assert len(truth) == len(ids) - 3
    assert _members(store, batch) == sorted(truth)
    _check_pages(store, batch, truth)  # indexes what the pages need as they are read
    assert store.link.call("EXISTS", store.keys.batch(batch).heads) == 0  # by queue: all
    assert _members(store, batch) == sorted(truth)
    _check_pages(store, batch, truth)


def test_pages_of_runs_no_job_has_left_are_counted_not_indexed(
        runs_store: RedisStorage) -> None:
    store = runs_store
    batch = new_id()
    store.create_batch(BatchSpec(id=batch))
    for queue, n in (("q1", 40), ("q2", 30), ("q1", 40)):
        store.enqueue_block(_block(batch, queue, n))
    store.enqueue_block(_block(batch, "q2", 10, run_at=store.now() + 3600))
    ids = sorted(job_id for q in ("q1", "q2") for job_id in _queue_ids(store, q))
    heads = store.keys.batch(batch).heads
    _check_pages(store, batch, _truth(store, ids), queues=(None,))
    assert _members(store, batch) == ids
    assert store.link.call("ZCARD", heads) == 4  # nothing indexed
    # Once a run has started, pages reaching it index it (then count the runs after it).
    assert store.dequeue(["q1"], "w", 1, 60.0)
    _check_pages(store, batch, _truth(store, ids), queues=(None,))
    assert store.link.call("ZCARD", heads) == 3
    _check_pages(store, batch, _truth(store, ids))  # a filter by queue walks every job


def test_a_walk_sees_every_job_while_a_reader_indexes_runs(runs_store: RedisStorage) -> None:
    store = runs_store
    batch, block = _one_run(store, batches.STEP * 2 + 100)
    walk = store._pages.batch_members(batch)
    seen = {job_id for job_id, _, _ in next(walk)}
    assert store._pages.index_step(batch)  # the run is cut under the walk
    seen |= {job_id for step in walk for job_id, _, _ in step}
    assert seen == set(block.ids)


def test_a_replayed_join_counts_nothing(runs_store: RedisStorage) -> None:
    store = runs_store
    batch, block = _one_run(store, 60)
    value = f"pending:{block.queue}"
    # A join is retried through an outage before its jobs are stored, so before they move.
    store._batches.join_batch(batch, value, block.ids)  # an exact replay: the same runs
    store._batches.join_batch(batch, value, block.ids[10:30])  # overlaps: sent one by one
    assert store._pages.index_step(batch)
    store._batches.join_batch(batch, value, block.ids)  # its run was cut by the step
    status = store.get_batch(batch)
    assert status is not None and status.total == 60 and status.counts == {"pending": 60}
    (job,) = store.dequeue(["q1"], "w", 1, 60.0)
    store._graph.sync_batches([(batch, job.id, "active:q1")] * 2)
    assert _members(store, batch) == sorted(block.ids)
    status = store.get_batch(batch)
    assert status is not None and status.counts == {"pending": 59, "active": 1}


def test_a_job_deleted_and_enqueued_again_counts_once(runs_store: RedisStorage) -> None:
    store = runs_store
    batch, block = _one_run(store, 20)
    gone = block.ids[4]
    assert store.delete_jobs([gone]) == 1
    store._graph.sync_batches([(batch, gone, "deleted:q1")])  # a replay of the delete
    status = store.get_batch(batch)
    assert status is not None and status.total == 19 and status.counts == {"pending": 19}
    store.enqueue([spec for spec in block.specs() if spec.id == gone])
    status = store.get_batch(batch)
    assert status is not None and status.total == 20 and status.counts == {"pending": 20}
    # In id order (list_jobs would put it last: it sorts by creation time first)
    assert [i for i, _ in store._pages.batch_page(batch, None, None, 0, 50)] == list(block.ids)


def test_callbacks_fire_once_when_the_runs_finish(runs_store: RedisStorage) -> None:
    store = runs_store
    done = JobSpec(id=f"{new_id()}-done", name="cb", queue="callbacks", payload="{}")
    batch = new_id()
    store.create_batch(BatchSpec(id=batch, callbacks={"complete": done}))
    for _ in range(3):
        store.enqueue_block(_block(batch, "q1", 25))
    store.close_batch(batch)
    while jobs := store.dequeue(["q1"], "w", 20, 60.0):
        assert all(store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs]))
    status = store.get_batch(batch)
    assert status is not None and status.complete and status.counts == {"succeeded": 75}
    assert status.callbacks_fired == ("complete",)
    assert store.count_jobs(queue="callbacks") == 1
    bk = store.keys.batch(batch)
    assert store.link.call("EXISTS", bk.heads, bk.runs) == 0  # every run dropped as it ran
    assert store.link.call("ZCARD", bk.order) == store.link.call("ZCARD", bk.states) == 75


def test_trimming_a_finished_batch_frees_its_runs(runs_store: RedisStorage) -> None:
    store = runs_store
    batch = new_id()
    store.create_batch(BatchSpec(id=batch))
    store.enqueue_block(_block(batch, "q1", 30))
    store.close_batch(batch)
    assert store.delete_jobs(list(_queue_ids(store, "q1"))) == 30  # the batch finishes empty
    status = store.get_batch(batch)
    assert status is not None and status.total == 0 and status.finished_at is not None
    store.trim(Retention(batch_seconds=-1.0))
    bk = store.keys.batch(batch)
    assert store.link.call("EXISTS", *(getattr(bk, f) for f in bk.__slots__)) == 0


def test_a_damaged_run_harms_only_its_own_batch(store: RedisStorage,
                                                caplog: pytest.LogCaptureFixture) -> None:
    good, bad = new_id(), new_id()
    for batch in (good, bad):
        store.create_batch(BatchSpec(id=batch))
        store.enqueue_block(_block(batch, "q1", 30))
        store.close_batch(batch)
    bk = store.keys.batch(bad)
    (head,) = store.link.call("ZRANGE", bk.heads, 0, -1)
    store.link.call("HSET", bk.runs, head, "\xff\nnot a run")
    with caplog.at_level(logging.WARNING, logger="conveyor.storage.redis"):
        while jobs := store.dequeue(["q1"], "w", 25, 60.0):
            assert all(store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs]))
        assert store.list_jobs(batch_id=bad, limit=5) == []  # the run is dropped, not read
    status = store.get_batch(good)
    assert status is not None and status.complete and status.counts == {"succeeded": 30}
    notes = [r.getMessage() for r in caplog.records if head in r.getMessage()]
    assert notes and all("\n" not in n and "unreadable" in n and bad in n for n in notes)
    assert store.link.call("EXISTS", bk.heads, bk.runs) == 0


def test_ids_make_runs_only_when_they_count_up() -> None:
    ids = new_ids(5)
    assert id_runs(ids) == [(ids[0], 5)]
    top = "0123456789ab" + "f" * 12
    after = f"{int(top, 16) + 1:024x}"
    assert id_runs([top, after]) == [(top, 1), (after, 1)]  # the counting part overflows
    assert id_runs([*ids[:2], *ids[3:]]) == [(ids[0], 2), (ids[3], 2)]
    assert id_runs([i.upper() for i in ids]) is None
    assert id_runs(["a" * 10]) is None
    assert id_runs([new_id() + "0" for _ in range(batches.MAX_RUNS + 1)]) is None
    assert id_runs([]) is None
    across = [f"{'0' * 12}{r:012x}" for r in range(0xFFE, 0x2003)]  # the last digits wrap
    assert id_runs(across) == [(across[0], len(across))]


def _queue_ids(store: RedisStorage, queue: str) -> list[str]:
    return [r.id for state in (JobState.PENDING, JobState.SCHEDULED)
            for r in store.list_jobs(state=state, queue=queue, limit=1000)]
