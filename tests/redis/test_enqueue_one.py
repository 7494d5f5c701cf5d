"""The one-by-one enqueue's own script, ``enqueue_one.lua``: a plain job (no flow control,
batch or workflow) enqueued alone is stored by it, and it writes exactly what ``enqueue.lua``
writes for the same job. The state line has one definition (``codec.STATE_FIELDS``, packed
by enqueue.lua's ``state_line``; DESIGN §2 "enqueue"): a second script writing it must not
drift from the first. The behaviour itself (pending, scheduled, an id twice) is the
conformance suite's, run on every store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, FlowControl, JobSpec
from conveyor.storage.redis import codec
from conveyor.storage.redis.storage import RedisStorage, open_redis
from tests.redis.conftest import prefixed


@pytest.fixture
def timed(redis_server: Any, clock: FakeClock) -> Iterator[RedisStorage]:
    """A Redis storage on the session's server whose scripts read the fake clock."""
    storage = open_redis(prefixed(redis_server.url), clock)
    yield storage
    storage.close()


def spy_scripts(store: RedisStorage, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the scripts ``store`` runs from now on."""
    names: list[str] = []
    run = store.scripts.run

    def recording(name: str, *args: Any, **kwargs: Any) -> Any:
        names.append(name)
        return run(name, *args, **kwargs)

    monkeypatch.setattr(store.scripts, "run", recording)
    return names


def stored(store: RedisStorage, queue: str, job_id: str) -> dict[str, Any]:
    """Everything a new job puts in its queue's keys."""
    qk = store.keys.queue(queue)
    call = store.link.call
    return {"static": call("HGET", qk.jobs, job_id), "state": call("HGET", qk.state, job_id),
            "pending": job_id in call("LRANGE", qk.pending, 0, -1),
            "scheduled": call("ZSCORE", qk.scheduled, job_id),
            "tokens": call("LLEN", qk.notify)}


def job(job_id: str, queue: str, **fields: Any) -> JobSpec:
    return JobSpec(id=job_id, name="mail.send", queue=queue, payload='{"a":[1]}', **fields)


# (run_at, deadline) relative to the clock: pending, due already, scheduled, with a deadline
CASES = {"pending": (None, None), "due": (-5.0, None), "scheduled": (60.0, None),
         "deadline": (None, 3600.0)}


@pytest.mark.parametrize("case", list(CASES))
def test_a_plain_job_alone_is_stored_by_enqueue_one_as_enqueue_lua_stores_it(
        timed: RedisStorage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
        case: str) -> None:
    run_at, deadline = CASES[case]
    fields = {"run_at": None if run_at is None else clock.now() + run_at,
              "deadline": None if deadline is None else clock.now() + deadline,
              "timeout": 12.5, "max_retries": 3}
    names = spy_scripts(timed, monkeypatch)
    [result] = timed.enqueue([job("fast", "a", **fields)])
    assert names == ["enqueue_one"] and result.created
    # the same job through enqueue.lua ("each"), in a queue of its own
    by_each = job("each", "b", **fields)
    reply = timed.scripts.run("enqueue", timed.ctx.register_queue("b"),
                              [timed.ctx.now_arg(), "b", "each", *codec.enqueue_args(by_each)])
    assert reply == ["1"]
    fast, each = stored(timed, "a", "fast"), stored(timed, "b", "each")
    assert fast["static"] == each["static"].replace('"q":"b"', '"q":"a"')
    assert fast["state"] == each["state"]
    assert (fast["pending"], fast["scheduled"], fast["tokens"]) == \
        (each["pending"], each["scheduled"], each["tokens"])
    assert fast["pending"] is (case != "scheduled")


def test_an_id_that_exists_is_left_as_it_was(
        timed: RedisStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    timed.enqueue([job("same", "a")])
    before = stored(timed, "a", "same")
    names = spy_scripts(timed, monkeypatch)
    again = timed.enqueue([JobSpec(id="same", name="other.job", queue="a", payload="{}")])
    assert names == ["enqueue_one"] and not again[0].created
    assert stored(timed, "a", "same") == before
    assert timed.link.call("LLEN", timed.keys.queue("a").pending) == 1


@pytest.mark.parametrize("extra", ["flow", "batch"])
def test_jobs_with_more_than_a_queue_go_through_enqueue_lua(
        store: RedisStorage, monkeypatch: pytest.MonkeyPatch, extra: str) -> None:
    names = spy_scripts(store, monkeypatch)
    if extra == "flow":
        spec = job("u", "a", flow=FlowControl(unique_key="k", unique_for=60.0))
    else:
        store.create_batch(BatchSpec(id="b1"))
        spec = job("m", "a", batch_id="b1")
    [result] = store.enqueue([spec])
    assert result.created and "enqueue" in names and "enqueue_one" not in names


def test_aenqueue_of_a_plain_job_alone_is_stored_as_enqueue_stores_it(
        timed: RedisStorage) -> None:
    [by_async] = asyncio.run(_aenqueue(timed, job("async", "a", timeout=3.0)))
    [by_sync] = timed.enqueue([job("sync", "a", timeout=3.0)])
    assert by_async.created and by_sync.created
    assert stored(timed, "a", "async") == {**stored(timed, "a", "sync"), "tokens": 2}


async def _aenqueue(store: RedisStorage, spec: JobSpec) -> Any:
    try:
        return await store.aenqueue([spec])
    finally:
        await store.aclose()
