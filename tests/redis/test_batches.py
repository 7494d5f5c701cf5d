"""Batch bookkeeping at the crash points the Redis design guards (DESIGN §4 "Redis"): the
batch update is made before the job's ack, and callbacks are enqueued exactly once."""

from __future__ import annotations

from typing import Any

import pytest

import redis
from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, BatchSpec, JobSpec, JobState, Outcome
from conveyor.storage.redis.storage import RedisStorage

pytestmark = pytest.mark.redis


def batch_with_callback(store: RedisStorage, jobs: int) -> list[str]:
    """A closed batch ``b`` of ``jobs`` jobs with a ``complete`` callback ``b-done``."""
    done = JobSpec(id="b-done", name="cb", queue="callbacks", payload="{}")
    store.create_batch(BatchSpec(id="b", callbacks={"complete": done}))
    ids = [r.id for r in store.enqueue([JobSpec(id=f"j{i}", name="t", queue="q", payload="{}",
                                                batch_id="b") for i in range(jobs)])]
    store.close_batch("b")
    return ids


def test_crash_between_batch_update_and_ack_reruns_the_job_and_counts_once(
        faked: RedisStorage, clock: FakeClock) -> None:
    batch_with_callback(faked, 1)
    (job,) = faked.dequeue(["q"], "w1", 1, 10)
    # The first half of an ack: the batch hears "succeeded"; then the worker dies.
    faked._graph.sync_batches([("b", job.id, "succeeded:q")])
    clock.advance(11)
    assert faked.reclaim_expired() == 1
    status = faked.get_batch("b")
    assert status is not None and status.counts == {"pending": 1} and not status.complete
    (again,) = faked.dequeue(["q"], "w2", 1, 10)
    assert faked.ack([Ack(again.id, again.token, Outcome.SUCCEEDED)]) == [True]
    status = faked.get_batch("b")
    assert status is not None and status.counts == {"succeeded": 1} and status.complete
    assert faked.count_jobs(queue="callbacks") == 1


def test_callback_whose_fired_mark_was_lost_is_not_enqueued_twice(
        store: RedisStorage, redis_server: Any) -> None:
    ids = batch_with_callback(store, 2)
    jobs = store.dequeue(["q"], "w", 5, 30)
    assert store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs]) == [True, True]
    client = redis.Redis.from_url(redis_server.url)
    # As if the process died after enqueueing the callback but before marking it fired.
    client.hdel(store.keys.batch("b").batch, "f:complete")
    client.close()
    # any later update re-checks callbacks
    store._graph.sync_batches([("b", ids[0], "succeeded:q")])
    status = store.get_batch("b")
    assert status is not None and status.callbacks_fired == ("complete",)
    assert store.count_jobs(queue="callbacks") == 1
    assert store.get_job("b-done").state is JobState.PENDING  # type: ignore[union-attr]


def test_replayed_batch_updates_never_double_count(store: RedisStorage) -> None:
    ids = batch_with_callback(store, 3)
    for _ in range(3):
        store._graph.sync_batches([("b", ids[0], "failed:q"), ("b", ids[1], "active:q")],
                                   confirm=False)  # replays as written, unread
    status = store.get_batch("b")
    assert status is not None and status.total == 3
    assert status.counts == {"failed": 1, "active": 1, "pending": 1}
