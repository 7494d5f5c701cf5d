"""Redis Cluster smoke test: queues and batches on different slots, no CROSSSLOT."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from conveyor.core.job import Ack, BatchSpec, JobSpec, JobState, Outcome
from conveyor.storage.redis.storage import open_redis
from tests.redis.conftest import prefixed

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


def test_cluster_round_trip_across_slots(redis_cluster: Any) -> None:
    store = open_redis(prefixed(redis_cluster.url))
    queues = [f"q{i}" for i in range(6)]  # spread over the three masters
    store.create_batch(BatchSpec(id="b1", callbacks={
        "complete": JobSpec(id="b1-done", name="cb", queue="callbacks", payload="{}")}))
    store.enqueue([JobSpec(id=f"j{i}", name="t", queue=q, payload="{}", batch_id="b1")
                   for i, q in enumerate(queues)])
    store.close_batch("b1")
    jobs = store.dequeue(queues, "w", 10, 30)
    assert len(jobs) == 6
    assert store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs]) == [True] * 6
    status = store.get_batch("b1")
    assert status is not None and status.complete and status.callbacks_fired == ("complete",)
    assert store.get_job("b1-done").state is JobState.PENDING  # type: ignore[union-attr]
    assert store.check_server() == []
    assert store.wait(["callbacks"], 1.0) is True
    store.close()


def test_cluster_wait_watches_every_queue(redis_cluster: Any) -> None:
    store = open_redis(prefixed(redis_cluster.url))
    other = open_redis(store.url)
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(store.wait(["qa", "qb", "qc"], 10.0)))
    waiter.start()
    time.sleep(0.1)  # let the waiter block; the assertion does not depend on timing
    other.enqueue([JobSpec(id="late", name="t", queue="qc", payload="{}")])
    waiter.join(timeout=10)
    assert woke == [True]
    other.close()
    store.close()
