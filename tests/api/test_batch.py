"""Client-side batches: creation with callbacks, jobs joining, chunked sends, close, re-open."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import Conveyor, JobState
from conveyor.client.registry import JobFunction
from conveyor.core.job import Outcome
from conveyor.errors import BatchNotFound
from tests.api.helpers import run_by_hand


@pytest.fixture
def row(app: Conveyor) -> JobFunction:
    @app.job(name="import.row")
    def row(n: int) -> int:
        return n

    return row


@pytest.fixture
def done(app: Conveyor) -> JobFunction:
    @app.job(name="import.done", queue="callbacks")
    def done(batch_id: str) -> None: ...

    return done


def test_jobs_in_the_block_join_the_batch_and_exit_closes_it(
    app: Conveyor, row: JobFunction
) -> None:
    with app.batch(description="rows", meta={"file": "a.csv"}) as batch:
        refs = [row.enqueue(n) for n in range(3)] + row.enqueue_many([[3], [4]])
        assert not app.batch_status(batch.id)["closed"]
    outside = row.enqueue(99)
    assert outside is not None
    assert batch.enqueue_count == 5
    status = app.batch_status(batch.id)
    assert (status["total"], status["closed"], status["description"]) == (5, True, "rows")
    assert status["meta"] == {"file": "a.csv"}
    for ref in refs:
        assert ref is not None and ref.status() is not None
        assert ref.status().batch_id == batch.id  # type: ignore[union-attr]
    assert app.get_job(outside.id).batch_id is None  # type: ignore[union-attr]


def test_callbacks_are_stored_and_fire_with_the_batch_id(
    app: Conveyor, row: JobFunction, done: JobFunction
) -> None:
    with app.batch(on_complete=done, on_success="import.done") as batch:
        row.enqueue(1)
    assert app.get_job(f"{batch.id}-complete") is None
    run_by_hand(app)
    for event in ("complete", "success"):
        callback = app.get_job(f"{batch.id}-{event}")
        assert callback is not None
        assert (callback.name, callback.queue, callback.args) == (
            "import.done", "callbacks", [batch.id])
        assert callback.batch_id is None
    assert app.get_job(f"{batch.id}-death") is None
    assert sorted(app.batch_status(batch.id)["callbacks_fired"]) == ["complete", "success"]


def test_an_error_in_the_block_still_sends_and_closes(app: Conveyor, row: JobFunction) -> None:
    with pytest.raises(ZeroDivisionError), app.batch() as batch:
        row.enqueue(1)
        row.enqueue(2)
        _ = 1 / 0
    status = app.batch_status(batch.id)
    assert (status["total"], status["closed"]) == (2, True)


def test_jobs_are_sent_a_thousand_at_a_time(app: Conveyor, row: JobFunction) -> None:
    with app.batch() as batch:
        for n in range(1_500):
            row.enqueue(n)
        assert app.storage.count_jobs(batch_id=batch.id) == 1_000
        # enqueue_many (no client middleware: the bulk path) stores the 500 buffered jobs
        # first, then its own in blocks as it goes, so none of them waits for the block's end.
        refs = row.enqueue_many([n] for n in range(1_500, 2_600))
        assert app.storage.count_jobs(batch_id=batch.id) == 2_600
        assert batch.enqueue_count == 2_600
    assert app.batch_status(batch.id)["total"] == 2_600
    assert refs[-1].status() is not None


def test_reopening_adds_jobs_without_closing_twice(app: Conveyor, row: JobFunction) -> None:
    with app.batch() as batch:
        row.enqueue(1)
    leased = app.storage.dequeue(["default"], "w", 1, 30.0)[0]  # the job adding more is active
    with app.batch(batch.id) as again:
        row.enqueue(2)
    assert again.enqueue_count == 1
    status = app.batch_status(batch.id)
    assert (status["total"], status["complete"]) == (2, False)
    assert leased.batch_id == batch.id


def test_reopening_needs_an_existing_open_batch(app: Conveyor) -> None:
    with pytest.raises(BatchNotFound), app.batch("no-such-batch"):
        pass
    with app.batch() as batch:
        pass
    with pytest.raises(ValueError, match="set when a batch is created"):
        app.batch(batch.id, description="x")
    with pytest.raises(RuntimeError, match="opens once"), batch:
        pass


def test_status_lists_failures_and_jobs_with_events(app: Conveyor, row: JobFunction) -> None:
    with app.batch() as batch:
        row.enqueue_many([[n] for n in range(4)])
    run_by_hand(app, Outcome.FAILED, message="row 0: bad phone")
    run_by_hand(app, Outcome.SUCCEEDED, result=1)
    status = app.batch_status(batch.id)
    assert status["counts"]["failed"] == 1 and status["counts"]["succeeded"] == 1
    [failure] = status["failures"]
    assert (failure["args"], failure["message"], failure["state"]) == (
        [0], "row 0: bad phone", "failed")
    pending = app.batch_jobs(batch.id, state="pending")
    assert [r.args for r in pending] == [[2], [3]]
    everything = app.batch_jobs(batch.id, limit=10)
    assert len(everything) == 4 and all(r.events for r in everything)
    assert [r.state for r in app.batch_jobs(batch.id, state=JobState.FAILED)] == [JobState.FAILED]


def test_async_with_in_asyncio_code(app: Conveyor, row: JobFunction) -> None:
    async def main() -> str:
        async with app.batch() as batch:
            row.enqueue(1)
            await asyncio.sleep(0)
            row.enqueue(2)
        return batch.id

    batch_id = asyncio.run(main())
    assert (app.batch_status(batch_id)["total"], app.batch_status(batch_id)["closed"]) == (2, True)


def test_status_of_an_unknown_batch(app: Conveyor) -> None:
    with pytest.raises(BatchNotFound):
        app.batch_status("missing")
