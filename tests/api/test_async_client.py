"""The asyncio API on every store: ``aenqueue`` / ``aenqueue_in`` / ``aenqueue_at`` /
``aenqueue_many``, ``async with app.batch()``, ``aget_job``, ``aresult``, ``acancel``,
``abatch_status``. On Redis and PostgreSQL a plain ``aenqueue`` never touches the blocking
client (the test takes it away); with client middleware the push runs as it always does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState
from conveyor.client.draft import EnqueueDraft
from conveyor.testing import drain
from tests.conformance.backends import backend_url

NATIVE = {"postgres", "redis", "redis_cluster"}


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis", "redis_cluster",
                        "redis_sentinel"])
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def app(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Conveyor]:
    app = Conveyor(backend_url(store, tmp_path, request.getfixturevalue))

    @app.job(name="t.add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.job(name="t.once", unique_for=60)
    def once(key: str) -> str:
        return key

    yield app
    app.close()


def _job(app: Conveyor, name: str) -> Any:
    fn = app.registry.get(name)
    assert fn is not None
    return fn


def test_enqueue_read_and_wait_from_an_event_loop(app: Conveyor, store: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    add, once = _job(app, "t.add"), _job(app, "t.once")
    app.storage.queues()  # opened here, outside the loop
    if store in NATIVE:  # a plain aenqueue must not need the blocking client
        def refuse(*_: object) -> None:
            raise AssertionError("aenqueue went through the blocking enqueue")

        monkeypatch.setattr(app.storage, "enqueue", refuse)

    async def scenario() -> dict[str, Any]:
        ref = await add.aenqueue(2, 3)
        by_name = await app.aenqueue("t.add", [10, 20])
        first, again = await once.aenqueue("k"), await once.aenqueue("k")
        later = await add.aenqueue_in(timedelta(hours=1), 1, 1)
        at = await add.aenqueue_at(datetime.now(timezone.utc) + timedelta(hours=2), 1, 2)
        record = await app.aget_job(ref.id)
        assert record is not None and record.state is JobState.PENDING
        await asyncio.to_thread(drain, app, ["default"])
        out = {"sum": await ref.aresult(timeout=10),
               "by_name": await by_name.aresult(timeout=10),
               "unique": (first.created, again.created, first.id == again.id),
               "later": (await app.aget_job(later.id)).state,
               "cancel": await app.acancel(at.id)}
        await app.aclose()
        return out

    seen = asyncio.run(scenario())
    assert seen == {"sum": 5, "by_name": 30, "unique": (True, False, True),
                    "later": JobState.SCHEDULED, "cancel": JobState.CANCELLED}


def test_batches_many_and_middleware_from_an_event_loop(app: Conveyor) -> None:
    add = _job(app, "t.add")
    seen: list[str] = []

    def tag(draft: EnqueueDraft, call_next: Callable[[], Any]) -> Any:
        draft.meta["tag"] = "async"
        seen.append(draft.name)
        return call_next()

    async def scenario() -> dict[str, Any]:
        async with app.batch(description="from a loop") as batch:
            refs = [await add.aenqueue(n, n) for n in range(3)]
            refs += await add.aenqueue_many([(n, 1) for n in range(2)])
        status = await app.abatch_status(batch.id)
        app.client_middleware.add(tag)
        tagged = await add.aenqueue(7, 7)
        record = await app.aget_job(tagged.id)
        await asyncio.to_thread(drain, app, ["default"])
        return {"total": status["total"], "refs": len(refs),
                "results": [await r.aresult(timeout=10) for r in refs],
                "meta": json.loads(record.payload)["m"] if record is not None else None}

    out = asyncio.run(scenario())
    assert out["total"] == 5 and out["refs"] == 5
    assert out["results"] == [0, 2, 4, 1, 2]
    assert seen == ["t.add"] and out["meta"] == {"tag": "async"}


@pytest.mark.parametrize("store", ["postgres", "redis", "redis_cluster"])
def test_aresult_is_woken_by_the_ack_instead_of_reading_again(
        app: Conveyor, store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    add = _job(app, "t.add")
    reads = 0
    read = app.storage.aget_job

    async def counted(job_id: str) -> Any:
        nonlocal reads
        reads += 1
        return await read(job_id)

    async def scenario() -> int:
        ref = await add.aenqueue(20, 22)
        monkeypatch.setattr(app.storage, "aget_job", counted)
        waiting = asyncio.create_task(ref.aresult(timeout=60))
        while reads < 2:  # its first reads done: it is waiting to be woken
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # a poller would read again and again meanwhile
        await asyncio.to_thread(drain, app, ["default"])
        result: int = await waiting
        await app.aclose()
        return result

    assert asyncio.run(scenario()) == 42
    # the read before it waited, the one after registering, the one after being woken
    assert reads == 3
