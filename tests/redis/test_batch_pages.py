"""Batch pages by rank (issue #14, item 12): the same pages and counts from the sorted sets
batch.lua keeps as from a batch stored without them (an earlier version), and a cancel of a
batch bigger than one step leaves exact sizes."""

from __future__ import annotations

from conveyor.core.ids import new_id
from conveyor.core.job import Ack, BatchSpec, JobSpec, JobState, Outcome
from conveyor.storage.redis import batches
from conveyor.storage.redis.storage import RedisStorage


def _batch(store: RedisStorage, n: int) -> tuple[str, list[str]]:
    batch = new_id()
    store.create_batch(BatchSpec(id=batch))
    ids = [new_id() for _ in range(n)]
    store.enqueue([JobSpec(id=i, name="t", queue="q1" if k % 3 else "q2", payload="{}",
                           batch_id=batch) for k, i in enumerate(ids)])
    store.close_batch(batch)
    return batch, ids


def _pages(store: RedisStorage, batch: str) -> list[object]:
    out: list[object] = []
    for state in (None, JobState.PENDING, JobState.SUCCEEDED, JobState.ACTIVE):
        for queue in (None, "q2"):
            out.append(store.count_jobs(state=state, queue=queue, batch_id=batch))
            for offset in (0, 7, 40):
                out.append([r.id for r in store.list_jobs(
                    state=state, queue=queue, batch_id=batch, offset=offset, limit=9)])
    return out


def test_batch_pages_are_the_same_with_and_without_the_rank_sets(store: RedisStorage) -> None:
    batch, ids = _batch(store, 60)
    jobs = store.dequeue(["q1", "q2"], "w", 25, 60.0)
    assert all(store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs[:15]]))
    ranked = _pages(store, batch)
    assert set(ranked[1]) == set(ids[:9]) and ranked[0] == 60  # type: ignore[arg-type]
    bk = store.keys.batch(batch)
    store.link.call("DEL", bk.order, bk.states)  # as a batch stored by an earlier version
    assert _pages(store, batch) == ranked


def test_cancel_of_a_batch_bigger_than_a_step(store: RedisStorage) -> None:
    batch, ids = _batch(store, batches.STEP * 2 + 30)
    (active,) = store.dequeue(["q2"], "w", 1, 60.0)
    assert store.cancel_batch(batch) == len(ids)
    status = store.get_batch(batch)
    assert status is not None and status.counts == {"cancelled": len(ids) - 1, "active": 1}
    assert {q.name: q.pending for q in store.queues()} == {"q1": 0, "q2": 0}
    assert store.count_jobs(state=JobState.CANCELLED, batch_id=batch) == len(ids) - 1
    assert store.dequeue(["q1", "q2"], "w", 2000, 60.0) == []
    assert store.get_job(active.id).cancel_requested  # type: ignore[union-attr]
