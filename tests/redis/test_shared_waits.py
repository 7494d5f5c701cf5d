"""Waits share one subscription: an event loop's result waits (``storage/redis/waiters.py``)
and a process's batch waits (``storage/redis/batch_wait.py``); a burst of async calls waits
for a pooled connection instead of failing.

redis-py's pools raise ``MaxConnectionsError`` past 100 connections, and each ``aresult`` or
``Batch.wait`` used to hold one for a subscription of its own: from about 90 concurrent
awaits on one loop, or 100 batch waits in one process, they failed.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

import redis
from conveyor import Conveyor
from conveyor.client.refs import JobRef
from conveyor.client.registry import JobFunction
from tests.api.helpers import echo_job, run_by_hand
from tests.support.waiting import wait_until

WAITS = 150


@pytest.fixture(params=["redis_server", "redis_cluster"])
def app(request: pytest.FixtureRequest) -> Iterator[Conveyor]:
    server = request.getfixturevalue(request.param)
    conveyor = Conveyor(f"{server.url}?prefix=w{uuid.uuid4().hex[:10]}")
    try:
        yield conveyor
    finally:
        conveyor.close()


@pytest.fixture
def job(app: Conveyor) -> JobFunction:
    return echo_job(app)


def _waiters_key(app: Conveyor) -> str:
    return str(app.storage.keys.queue("default").waiters)  # type: ignore[union-attr]


def _admin(app: Conveyor) -> Any:
    return app.storage.link.client  # type: ignore[union-attr]


def test_a_burst_of_result_awaits_on_one_loop_all_return(app: Conveyor,
                                                         job: JobFunction) -> None:
    ids = [job.enqueue(i).id for i in range(WAITS)]
    key = _waiters_key(app)

    async def main() -> list[Any]:
        waits = [asyncio.create_task(JobRef(job_id, True, app.client).aresult(timeout=60))
                 for job_id in ids]
        await asyncio.to_thread(wait_until, lambda: _admin(app).scard(key) == WAITS, 30,
                                what="every result wait to register")
        if not app.storage.link.settings.cluster:  # type: ignore[union-attr]
            # one subscriber for all of them (one each before)
            assert _admin(app).pubsub_numsub(key) == [(key, 1)]
        for _ in ids:
            await asyncio.to_thread(run_by_hand, app)
        return await asyncio.gather(*waits)

    assert asyncio.run(main()) == [None] * WAITS  # run_by_hand acks without a result
    assert _admin(app).scard(key) == 0  # each wait took its id away


@pytest.mark.parametrize("app", ["redis_server"], indirect=True)  # CLIENT KILL: one node
def test_a_killed_subscription_wakes_every_wait_and_subscribes_again(
    app: Conveyor, job: JobFunction, redis_server: Any
) -> None:
    first, second = job.enqueue(1).id, job.enqueue(2).id
    admin = redis.Redis.from_url(redis_server.url)

    async def main() -> list[bool]:
        seen: list[bool] = []
        storage = app.storage
        async with storage.afinished(first, "default") as one, \
                storage.afinished(second, "default") as two:
            seen.append(await one.wait(0.05))  # nothing ended: not woken
            assert admin.client_kill_filter(_type="pubsub") >= 1
            # Woken though nothing ended: a message may have gone with the connection, so
            # each caller reads again, after its wait subscribed on a new one.
            seen += [await one.wait(60), await two.wait(60)]
            for _ in range(2):
                await asyncio.to_thread(run_by_hand, app)
            seen += [await one.wait(60), await two.wait(60)]
        return seen

    assert asyncio.run(main()) == [False, True, True, True, True]
    admin.close()


def _batch(app: Conveyor, job: JobFunction) -> str:
    with app.batch() as batch:
        job.enqueue(1)
    return batch.id


def test_many_batch_waits_share_one_subscription(app: Conveyor, job: JobFunction) -> None:
    batch_ids = [_batch(app, job) for _ in range(WAITS)]
    cluster = app.storage.link.settings.cluster  # type: ignore[union-attr]
    before = 0 if cluster else len(_admin(app).client_list(_type="pubsub"))
    with ExitStack() as stack:
        waiters = [stack.enter_context(app.storage.batch_finished(b)) for b in batch_ids]
        if not cluster:  # one more subscriber for all of them (one per wait before)
            assert len(_admin(app).client_list(_type="pubsub")) <= before + 1
        for _ in batch_ids:
            run_by_hand(app)
        # every wait is woken by its own batch (one not woken would sit out its 60 s)
        assert [w.wait(60) for w in waiters] == [True] * WAITS


@pytest.mark.parametrize("app", ["redis_server"], indirect=True)  # CLIENT KILL: one node
def test_a_killed_batch_subscription_wakes_every_wait_and_subscribes_again(
    app: Conveyor, job: JobFunction
) -> None:
    first, second = _batch(app, job), _batch(app, job)
    with app.storage.batch_finished(first) as one, app.storage.batch_finished(second) as two:
        assert one.wait(0.05) is False  # nothing finished: not woken
        assert _admin(app).client_kill_filter(_type="pubsub") >= 1
        # woken though nothing finished; each subscribes again before its caller reads
        assert one.wait(60) is True
        assert two.wait(60) is True
        assert len(_admin(app).client_list(_type="pubsub")) == 1
        run_by_hand(app)
        run_by_hand(app)
        assert one.wait(60) is True
        assert two.wait(60) is True
    assert app.wait_batch(first, timeout=60)["complete"] is True


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_closing_the_store_under_a_waiting_reader_ends_it_quietly(
    request: pytest.FixtureRequest, job: JobFunction
) -> None:
    app = request.getfixturevalue("app")
    batch_id = _batch(app, job)
    with app.storage.batch_finished(batch_id) as waiter:
        assert waiter.wait(0.05) is False
        app.close()  # the pool's sockets close under the reader thread
        wait_until(lambda: not any(t.name == "conveyor-batch-waits" and t.is_alive()
                                   for t in threading.enumerate()),
                   30, what="the reader to end")
