"""A batch's view of a job on Redis (``lua/batch.lua``, kept in another hash slot than the job)
is written after the script that moved the job, so two processes can report one job in either
order. The rule every store keeps (docs/reliability.md, the fault scenarios' exact batches): a
batch's counts always come back to a recount of its jobs. These tests hold one process between
reading a job's state and reporting it until another has moved the job on."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.ids import new_id
from conveyor.core.job import Ack, BatchSpec, JobSpec, JobState, Outcome
from conveyor.storage.redis.storage import RedisStorage

pytestmark = pytest.mark.redis


def _one_job_batch(store: RedisStorage) -> tuple[str, str]:
    batch = new_id()
    store.create_batch(BatchSpec(id=batch))
    job = new_id()
    store.enqueue([JobSpec(id=job, name="t", queue="q", payload="[]", batch_id=batch)])
    store.close_batch(batch)
    return batch, job


def _counts(store: RedisStorage, batch: str) -> dict[str, int]:
    status = store.get_batch(batch)
    assert status is not None
    return {k: v for k, v in status.counts.items() if v}


def _state(store: RedisStorage, job: str) -> JobState:
    record = store.get_job(job)
    assert record is not None
    return record.state


def _hold_first_report(store: RedisStorage, job: str, meanwhile: Callable[[], None]) -> None:
    """Run ``meanwhile`` when the batch view is first about to hear of ``job``, then let that
    (by then stale) report through."""
    sync = store._graph.sync_batches
    held = [False]

    def late(moves: Iterable[tuple[str, str, str]], *args: Any, **kwargs: Any) -> Any:
        moves = list(moves)
        if not held[0] and any(j == job for _, j, _ in moves):
            held[0] = True
            meanwhile()
        return sync(moves, *args, **kwargs)

    store._graph.sync_batches = late  # type: ignore[method-assign]


def test_a_refused_ack_reporting_a_job_another_worker_has_since_finished(
        faked: RedisStorage, clock: FakeClock) -> None:
    """Worker A's lease expired and B re-ran the job; A's late ack is refused and reports the
    job as B held it (active), but B finishes before that report lands: the batch must say
    succeeded, as the job does (it said active for good, a batch that never completes)."""
    batch, job = _one_job_batch(faked)
    [a] = faked.dequeue(["q"], "wa", 1, 5.0)
    clock.advance(10)
    assert faked.reclaim_expired() == 1
    [b] = faked.dequeue(["q"], "wb", 1, 5.0)
    _hold_first_report(faked, job, lambda: faked.ack([Ack(job, b.token, Outcome.SUCCEEDED)]))
    assert faked.ack([Ack(job, a.token, Outcome.SUCCEEDED)]) == [False]
    assert _state(faked, job) is JobState.SUCCEEDED
    assert _counts(faked, batch) == {"succeeded": 1}
    status = faked.get_batch(batch)
    assert status is not None and status.complete


def test_a_reclaim_reporting_a_job_another_worker_has_since_leased_and_finished(
        faked: RedisStorage, clock: FakeClock) -> None:
    """The recoverer moves an expired lease back to pending and is slow to tell the batch;
    meanwhile another worker leases the job and finishes it: the batch must not end up
    saying pending."""
    batch, job = _one_job_batch(faked)
    faked.dequeue(["q"], "wa", 1, 5.0)
    clock.advance(10)

    def rerun() -> None:
        [b] = faked.dequeue(["q"], "wb", 1, 5.0)
        faked.ack([Ack(job, b.token, Outcome.SUCCEEDED)])

    _hold_first_report(faked, job, rerun)
    assert faked.reclaim_expired() == 1
    assert _state(faked, job) is JobState.SUCCEEDED
    assert _counts(faked, batch) == {"succeeded": 1}
