"""Batches: live counters on every transition, completion, exactly-once callbacks, cancel."""

from __future__ import annotations

import threading

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, BatchSpec, EventKind, JobState, Outcome
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.storage import Backend, Retention
from conveyor.storage.batch_records import BatchStatus
from tests.conformance.helpers import (
    ack,
    boom,
    kinds_of,
    new_job_id,
    put,
    run_in_threads,
    spec,
    state_of,
    take,
    take_one,
    worker_info,
)


def _batch(backend: Backend, *, callbacks: bool = True, **kwargs: object) -> BatchSpec:
    """Create a batch whose callbacks (if any) land on the ``callbacks`` queue."""
    batch_id = new_job_id("b")
    moments = ("complete", "success", "death") if callbacks else ()
    cbs = {m: spec("callbacks", name=f"on_{m}", job_id=f"{batch_id}-{m}") for m in moments}
    batch = BatchSpec(id=batch_id, callbacks=cbs, **kwargs)  # type: ignore[arg-type]
    backend.create_batch(batch)
    return batch


def _status(backend: Backend, batch_id: str) -> BatchStatus:
    status = backend.get_batch(batch_id)
    assert status is not None
    return status


def _counts(backend: Backend, batch_id: str) -> dict[str, int]:
    """Non-zero counters of a batch, plus its total."""
    status = _status(backend, batch_id)
    return {**{k: v for k, v in status.counts.items() if v}, "total": status.total}


def _fired(backend: Backend, batch_id: str) -> list[str]:
    return sorted(_status(backend, batch_id).callbacks_fired)


def _callback_jobs(backend: Backend) -> list[str]:
    return sorted(r.name for r in backend.list_jobs(queue="callbacks", limit=100))


def test_create_and_read_a_batch(backend: Backend, clock: FakeClock) -> None:
    batch = _batch(backend, description="import rows", meta={"file": "rows.csv"})
    status = _status(backend, batch.id)
    assert (status.id, status.description, status.meta) == (batch.id, "import rows",
                                                            {"file": "rows.csv"})
    assert status.total == 0 and not status.closed and not status.complete
    assert status.created_at == clock.now() and status.callbacks_fired == ()
    assert backend.get_batch("no-such-batch") is None


def test_counters_follow_every_transition(backend: Backend, clock: FakeClock) -> None:
    batch = _batch(backend)
    backend.enqueue([spec(batch_id=batch.id) for _ in range(4)]
                    + [spec(batch_id=batch.id, run_at=clock.now() + 50)])
    assert _counts(backend, batch.id) == {"pending": 4, "scheduled": 1, "total": 5}
    a, b, c, d = take(backend, count=4, lease=10)
    assert _counts(backend, batch.id) == {"active": 4, "scheduled": 1, "total": 5}
    assert _status(backend, batch.id).started_at == clock.now()
    assert ack(backend, a)
    assert ack(backend, b, Outcome.FAILED, message="no")
    assert ack(backend, c, Outcome.RETRY, error=boom(), retry_in=5)
    assert _counts(backend, batch.id) == {
        "succeeded": 1, "failed": 1, "retrying": 1, "active": 1, "scheduled": 1, "total": 5}
    clock.advance(11)  # d's lease runs out: recovered, then run again
    assert backend.reclaim_expired() == 1
    assert _counts(backend, batch.id) == {
        "succeeded": 1, "failed": 1, "retrying": 1, "pending": 1, "scheduled": 1, "total": 5}
    assert backend.promote_due() == 1  # c's retry is due; the scheduled job is not yet
    assert _counts(backend, batch.id)["pending"] == 2
    clock.advance(50)
    assert backend.promote_due() == 1
    for job in take(backend, count=3):
        assert ack(backend, job)
    assert _counts(backend, batch.id) == {"succeeded": 4, "failed": 1, "total": 5}
    assert d.id in {r.id for r in backend.list_jobs(batch_id=batch.id,
                                                    state=JobState.SUCCEEDED)}


def test_batch_completes_when_closed_and_every_job_terminal(backend: Backend,
                                                             clock: FakeClock) -> None:
    batch = _batch(backend)
    ids = [put(backend, batch_id=batch.id) for _ in range(2)]
    backend.close_batch(batch.id)
    status = _status(backend, batch.id)
    assert status.closed and not status.complete and status.finished_at is None
    assert ack(backend, take_one(backend))
    assert not _status(backend, batch.id).complete and _fired(backend, batch.id) == []
    clock.advance(5)
    assert ack(backend, take_one(backend))
    status = _status(backend, batch.id)
    assert status.complete and status.finished_at == clock.now() and status.percent == 100.0
    assert _fired(backend, batch.id) == ["complete", "success"]
    assert _callback_jobs(backend) == ["on_complete", "on_success"]
    assert state_of(backend, f"{batch.id}-complete") is JobState.PENDING
    assert all(state_of(backend, i) is JobState.SUCCEEDED for i in ids)


def test_an_open_batch_never_completes(backend: Backend) -> None:
    batch = _batch(backend)
    put(backend, batch_id=batch.id)
    assert ack(backend, take_one(backend))
    assert not _status(backend, batch.id).complete
    assert _fired(backend, batch.id) == [] and _callback_jobs(backend) == []


def test_closing_a_batch_whose_jobs_all_finished_completes_it(backend: Backend) -> None:
    batch = _batch(backend)
    put(backend, batch_id=batch.id)
    assert ack(backend, take_one(backend), Outcome.FAILED, message="no")
    backend.close_batch(batch.id)
    assert _status(backend, batch.id).complete
    assert _fired(backend, batch.id) == ["complete"]  # not all succeeded: no success callback
    assert _callback_jobs(backend) == ["on_complete"]


def test_death_callback_fires_once_on_the_first_dead_job(backend: Backend) -> None:
    batch = _batch(backend)
    for _ in range(3):
        put(backend, batch_id=batch.id)
    backend.close_batch(batch.id)
    first, second, third = take(backend, count=3)
    assert ack(backend, first, Outcome.DEAD, error=boom())
    assert _fired(backend, batch.id) == ["death"]
    assert ack(backend, second, Outcome.DEAD, error=boom())
    assert _fired(backend, batch.id) == ["death"]
    assert ack(backend, third)
    assert _fired(backend, batch.id) == ["complete", "death"]
    assert _callback_jobs(backend) == ["on_complete", "on_death"]


def test_recovered_and_rerun_job_counts_once(backend: Backend, clock: FakeClock) -> None:
    batch = _batch(backend)
    put(backend, batch_id=batch.id)
    backend.close_batch(batch.id)
    for _ in range(2):
        take_one(backend, lease=5)
        clock.advance(6)
        assert backend.reclaim_expired() == 1
        assert _counts(backend, batch.id) == {"pending": 1, "total": 1}
    assert ack(backend, take_one(backend))
    assert _counts(backend, batch.id) == {"succeeded": 1, "total": 1}
    assert _fired(backend, batch.id) == ["complete", "success"]


def test_callbacks_fire_exactly_once_when_the_last_jobs_finish_together(
        backend: Backend) -> None:
    batch = _batch(backend)
    backend.enqueue([spec(batch_id=batch.id) for _ in range(16)])
    backend.close_batch(batch.id)
    jobs = take(backend, count=16)
    assert len(jobs) == 16
    gate = threading.Barrier(len(jobs))

    def finish(slot: int) -> None:
        gate.wait()  # every last job is acknowledged at the same moment
        job = jobs[slot]
        assert backend.ack([Ack(job.id, job.token, Outcome.SUCCEEDED)]) == [True]

    run_in_threads(finish, len(jobs))
    assert _counts(backend, batch.id) == {"succeeded": 16, "total": 16}
    assert _fired(backend, batch.id) == ["complete", "success"]
    assert _callback_jobs(backend) == ["on_complete", "on_success"]


def test_retry_by_hand_after_completion_never_fires_complete_again(backend: Backend) -> None:
    batch = _batch(backend)
    job_id = put(backend, batch_id=batch.id)
    backend.close_batch(batch.id)
    assert ack(backend, take_one(backend), Outcome.DEAD, error=boom())
    assert _fired(backend, batch.id) == ["complete", "death"]
    assert backend.retry_jobs([job_id]) == 1
    assert _counts(backend, batch.id) == {"pending": 1, "total": 1}
    assert not _status(backend, batch.id).complete
    assert ack(backend, take_one(backend), Outcome.DEAD, error=boom())
    assert _status(backend, batch.id).complete
    assert _callback_jobs(backend) == ["on_complete", "on_death"]


def test_cancel_batch(backend: Backend, clock: FakeClock) -> None:
    batch = _batch(backend, callbacks=False)
    ids = [put(backend, batch_id=batch.id) for _ in range(3)]
    scheduled = put(backend, batch_id=batch.id, run_at=clock.now() + 60)
    outsider = put(backend)
    running = take_one(backend)
    assert running.id == ids[0]
    backend.close_batch(batch.id)
    assert backend.cancel_batch(batch.id) == 4
    # Again: the running job is counted again (it is being asked to stop), but asked once.
    assert backend.cancel_batch(batch.id) == 1
    assert backend.cancel(running.id) is JobState.ACTIVE
    assert kinds_of(backend, running.id).count(EventKind.CANCEL_REQUESTED) == 1
    assert [state_of(backend, i) for i in [*ids[1:], scheduled]] == [JobState.CANCELLED] * 3
    assert state_of(backend, outsider) is JobState.PENDING
    status = _status(backend, batch.id)
    assert status.cancelled and not status.complete
    reply = backend.heartbeat(worker_info(clock), {running.id: running.token}, 30)
    assert reply.cancel == frozenset({running.id})
    assert ack(backend, running, Outcome.CANCELLED)
    assert _status(backend, batch.id).complete
    assert _counts(backend, batch.id) == {"cancelled": 4, "total": 4}


def test_batch_jobs_page_and_filter(backend: Backend) -> None:
    batch = _batch(backend, callbacks=False)
    ids = [put(backend, batch_id=batch.id) for _ in range(7)]
    put(backend)  # not in the batch
    for job in take(backend, count=3):
        assert ack(backend, job, Outcome.FAILED, message="no")
    assert backend.count_jobs(batch_id=batch.id) == 7
    assert backend.count_jobs(batch_id=batch.id, state=JobState.FAILED) == 3
    assert backend.count_jobs(batch_id=batch.id, state=JobState.PENDING) == 4
    pages = [backend.list_jobs(batch_id=batch.id, offset=o, limit=3) for o in (0, 3, 6)]
    assert [r.id for page in pages for r in page] == ids
    failed = backend.list_jobs(batch_id=batch.id, state=JobState.FAILED, offset=1, limit=5)
    assert [r.id for r in failed] == ids[1:3]
    assert all(r.batch_id == batch.id for page in pages for r in page)


def test_jobs_may_join_a_closed_batch_until_it_finishes(backend: Backend) -> None:
    batch = _batch(backend)
    put(backend, batch_id=batch.id)
    backend.close_batch(batch.id)
    job = take_one(backend)
    put(backend, batch_id=batch.id)  # e.g. a job of the batch adding more work
    assert ack(backend, job)
    assert not _status(backend, batch.id).complete
    assert ack(backend, take_one(backend))
    assert _status(backend, batch.id).complete
    assert _counts(backend, batch.id) == {"succeeded": 2, "total": 2}


def test_enqueue_into_a_finished_batch_raises(backend: Backend) -> None:
    batch = _batch(backend)
    put(backend, batch_id=batch.id)
    backend.close_batch(batch.id)
    assert ack(backend, take_one(backend))
    with pytest.raises(BatchClosedError):
        backend.enqueue([spec(batch_id=batch.id)])
    assert _counts(backend, batch.id) == {"succeeded": 1, "total": 1}


def test_enqueue_into_an_unknown_batch_raises(backend: Backend) -> None:
    with pytest.raises(BatchNotFound):
        backend.enqueue([spec(batch_id="no-such-batch")])
    assert backend.count_jobs() == 0
    with pytest.raises(BatchNotFound):
        backend.close_batch("no-such-batch")


def test_list_batches_newest_first(backend: Backend, clock: FakeClock) -> None:
    made = []
    for _ in range(3):
        made.append(_batch(backend, callbacks=False).id)
        clock.advance(1)
    assert [b.id for b in backend.list_batches()] == made[::-1]
    assert [b.id for b in backend.list_batches(offset=1, limit=1)] == [made[1]]


def _dead_by_ack(backend: Backend, clock: FakeClock, job_id: str) -> None:
    assert ack(backend, take_one(backend), Outcome.DEAD, error=boom())


def _dead_by_kill(backend: Backend, clock: FakeClock, job_id: str) -> None:
    assert backend.kill_jobs([job_id]) == 1


def _dead_by_poison(backend: Backend, clock: FakeClock, job_id: str) -> None:
    for _ in range(2):
        take_one(backend, lease=1)
        clock.advance(2)
        assert backend.reclaim_expired(max_recoveries=1) == 1


def _dead_by_deadline(backend: Backend, clock: FakeClock, job_id: str) -> None:
    clock.advance(1000)
    assert take(backend) == []


@pytest.mark.parametrize("die", [_dead_by_ack, _dead_by_kill, _dead_by_poison, _dead_by_deadline])
def test_every_way_to_die_fires_the_death_callback_once(backend: Backend, clock: FakeClock,
                                                       die: object) -> None:
    batch = _batch(backend)
    job_id = put(backend, batch_id=batch.id, deadline=clock.now() + 500)
    die(backend, clock, job_id)  # type: ignore[operator]
    assert state_of(backend, job_id) is JobState.DEAD
    assert _counts(backend, batch.id) == {"dead": 1, "total": 1}
    assert _fired(backend, batch.id) == ["death"]
    backend.close_batch(batch.id)
    assert _fired(backend, batch.id) == ["complete", "death"]
    assert _callback_jobs(backend) == ["on_complete", "on_death"]


def test_counters_follow_operator_actions(backend: Backend) -> None:
    batch = _batch(backend, callbacks=False)
    a, b, c, d = (put(backend, batch_id=batch.id) for _ in range(4))
    assert backend.kill_jobs([a]) == 1
    assert backend.cancel(b) is JobState.CANCELLED
    assert _counts(backend, batch.id) == {"dead": 1, "cancelled": 1, "pending": 2, "total": 4}
    assert backend.retry_jobs([a, b]) == 2
    assert _counts(backend, batch.id) == {"pending": 4, "total": 4}
    job = take_one(backend)
    assert ack(backend, job, Outcome.INTERRUPTED)
    assert _counts(backend, batch.id) == {"pending": 4, "total": 4}
    assert {c, d} <= {r.id for r in backend.list_jobs(batch_id=batch.id)}


def test_trim_forgets_finished_batches_past_retention(backend: Backend, clock: FakeClock) -> None:
    done = _batch(backend, callbacks=False)
    put(backend, batch_id=done.id)
    backend.close_batch(done.id)
    assert ack(backend, take_one(backend))
    still_open = _batch(backend, callbacks=False)
    clock.advance(3 * 24 * 3600)
    backend.trim(Retention(batch_seconds=24 * 3600))
    assert backend.get_batch(done.id) is None
    assert backend.get_batch(still_open.id) is not None


def test_cancel_of_an_unknown_batch_cancels_nothing(backend: Backend) -> None:
    job_id = put(backend)
    assert backend.cancel_batch("no-such-batch") == 0
    assert state_of(backend, job_id) is JobState.PENDING


def test_deleting_a_batch_job_takes_it_out_of_the_counters(backend: Backend) -> None:
    batch = _batch(backend, callbacks=False)
    ids = [put(backend, batch_id=batch.id) for _ in range(3)]
    assert backend.delete_jobs([ids[0]]) == 1
    assert _counts(backend, batch.id) == {"pending": 2, "total": 2}
    assert backend.count_jobs(batch_id=batch.id) == 2
