"""Waiting for a batch: ``Batch.wait`` / ``app.wait_batch`` on every store, and the store's
``batch_finished`` waiter under it (woken as the batch finishes, not by polling)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.client.registry import JobFunction
from conveyor.errors import BatchNotFound, ResultTimeout
from tests.api.helpers import run_by_hand
from tests.conformance.backends import BACKENDS, backend_url

# The longest schema name a URL may give: NOTIFY channels are made of it and have 63 bytes.
LONG_SCHEMA = "t" + uuid.uuid4().hex + "x" * 18
assert len(LONG_SCHEMA) == 51
# Redis through Sentinel cannot keep a subscription across a failover: it reads instead.
NOTIFYING = tuple(b for b in BACKENDS if b != "redis_sentinel")


@pytest.fixture(params=BACKENDS)
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    """An app on each store; PostgreSQL in a schema of the longest name allowed."""
    url = backend_url(request.param, tmp_path, request.getfixturevalue)
    if request.param == "postgres":
        url = url.split("?", 1)[0] + f"?schema={LONG_SCHEMA}"
    conveyor = Conveyor(url)
    try:
        yield conveyor
    finally:
        conveyor.close()


@pytest.fixture
def job(app: Conveyor) -> JobFunction:
    @app.job(name="t.step")
    def step(n: int) -> int:
        return n

    return step


def _batch_of(app: Conveyor, job: JobFunction, n: int) -> str:
    with app.batch(description="rows") as batch:
        for i in range(n):
            job.enqueue(i)
    return batch.id


def test_wait_returns_the_status_once_every_job_finished(app: Conveyor, job: JobFunction) -> None:
    with app.batch() as batch:
        for i in range(3):
            job.enqueue(i)
    started = threading.Event()

    def worker() -> None:
        started.wait(30)
        for _ in range(3):
            run_by_hand(app)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        with pytest.raises(ResultTimeout, match=f"batch {batch.id} did not complete"):
            batch.wait(timeout=0.05)
        started.set()
        status = batch.wait(timeout=60)
    finally:
        started.set()
        thread.join()
    assert status["complete"] is True
    assert status["counts"]["succeeded"] == 3
    assert status["failures"] == []
    assert app.wait_batch(batch.id, timeout=0)["complete"] is True  # done: no wait at all


def test_waiting_for_a_batch_that_does_not_exist(app: Conveyor) -> None:
    with pytest.raises(BatchNotFound, match="batch nope does not exist"):
        app.wait_batch("nope", timeout=1)


@pytest.mark.parametrize("app", NOTIFYING, indirect=True)
def test_the_store_wakes_the_waiter_when_the_batch_finishes(
    app: Conveyor, job: JobFunction
) -> None:
    batch_id = _batch_of(app, job, 2)
    other_id = _batch_of(app, job, 1)
    with app.storage.batch_finished(batch_id) as waiter:
        assert waiter.notifies
        assert waiter.wait(0.05) is False  # nothing finished yet: not woken
        run_by_hand(app)  # one of two jobs: the batch goes on
        # The batch finishes after the waiter opened and before it waits: a wait that
        # relied on reading again (a missed wake-up) would sit out its 60 s and fail.
        run_by_hand(app)
        run_by_hand(app)  # the other batch finishes too
        assert waiter.wait(60) is True
    status = app.storage.get_batch(batch_id)
    assert status is not None and status.complete
    assert app.wait_batch(other_id, timeout=60)["complete"] is True


@pytest.mark.parametrize("store", ["redis_sentinel"])  # named, so --stores sees the store
def test_a_sentinel_waiter_says_it_does_not_notify(store: str, request: pytest.FixtureRequest,
                                                   tmp_path: Path) -> None:
    url = backend_url(store, tmp_path, request.getfixturevalue)
    app = Conveyor(url)
    try:
        with app.storage.batch_finished("any") as waiter:
            assert waiter.notifies is False
            assert waiter.wait(0.01) is False
    finally:
        app.close()


@pytest.mark.parametrize("app", ["postgres"], indirect=True)
def test_a_result_waiter_on_the_longest_schema_name_lets_acks_through(
    app: Conveyor, job: JobFunction
) -> None:
    """The acks NOTIFY result waiters on a channel named after the schema: with a 51-letter
    schema that name was longer than PostgreSQL allows, and every ack of an awaited job failed."""
    ref = job.enqueue(5)
    assert ref is not None

    async def wait_and_run() -> object:
        async def later() -> None:
            await asyncio.sleep(0.05)  # after aresult has registered as a waiter
            await asyncio.to_thread(run_by_hand, app, result=5)

        runner = asyncio.create_task(later())
        try:
            return await ref.aresult(timeout=60)
        finally:
            await runner

    assert asyncio.run(wait_and_run()) == 5


@pytest.mark.parametrize("app", ["sqlite", "postgres"], indirect=True)
def test_await_batch_in_asyncio(app: Conveyor, job: JobFunction,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("conveyor.client.batch.WAIT_SLICE", 0.05)  # several slices before the end
    batch_id = _batch_of(app, job, 2)

    async def main() -> dict[str, object]:
        with pytest.raises(ResultTimeout, match=f"batch {batch_id} did not complete within"):
            await app.await_batch(batch_id, timeout=0.12)

        async def later() -> None:
            await asyncio.sleep(0.2)  # past a few slices of the wait below
            for _ in range(2):
                await asyncio.to_thread(run_by_hand, app)

        runner = asyncio.create_task(later())
        try:
            return await app.await_batch(batch_id, timeout=60)
        finally:
            await runner

    status = asyncio.run(main())
    assert status["complete"] is True and status["counts"] == {**status["counts"], "succeeded": 2}


@pytest.mark.parametrize("app", ["memory", "postgres"], indirect=True)
def test_a_workflow_waits_the_same_way(app: Conveyor, job: JobFunction) -> None:
    wf = app.workflow()
    first = wf.add(job.s(1))
    wf.add(job.s(2), after=[first])
    wf.enqueue()
    with pytest.raises(ResultTimeout, match=f"workflow {wf.id} did not complete"):
        wf.wait(timeout=0.05)
    done = threading.Thread(target=lambda: [run_by_hand(app) for _ in range(2)])
    done.start()
    status = wf.wait(timeout=60)
    done.join()
    assert status["complete"] is True and status["counts"]["succeeded"] == 2


@pytest.mark.parametrize("store", ["postgres"])  # named, so --stores sees the store
def test_without_listen_postgres_waits_by_reading(store: str, request: pytest.FixtureRequest,
                                                  tmp_path: Path) -> None:
    """``?listen=0`` (PgBouncer in transaction mode): no LISTEN, so the waiter only sleeps
    and ``wait_batch`` reads with a backoff, and still sees the end."""
    url = backend_url(store, tmp_path, request.getfixturevalue) + "&listen=0"
    app = Conveyor(url)
    try:
        @app.job(name="t.step")
        def step(n: int) -> int:
            return n

        batch_id = _batch_of(app, step, 2)
        with app.storage.batch_finished(batch_id) as waiter:
            assert waiter.notifies is False
        done = threading.Thread(target=lambda: [run_by_hand(app) for _ in range(2)])
        done.start()
        status = app.wait_batch(batch_id, timeout=60)
        done.join()
        assert status["complete"] is True
    finally:
        app.close()
