"""``aenqueue`` on Redis talks to a connection of its pool itself (``aio._exchange``), past
redis-py's per-call layers: what those layers did for it must still hold — a connection the
server closed is replaced, a call past its timeout fails in one line and leaves no reply
behind for the next call on that connection, and an error reply is raised."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import redis
from conveyor.core.ids import new_id
from conveyor.core.job import EnqueueResult, JobSpec
from conveyor.errors import StorageUnavailable
from conveyor.storage.redis import aio
from conveyor.storage.redis.storage import RedisStorage

# Generated ids by name: a caller-chosen id takes the blocking path (``enqueue.taken``),
# and these tests are about the native one.
IDS: dict[str, str] = {}


def _job(name: str) -> JobSpec:
    return JobSpec(id=IDS.setdefault(name, new_id()), name="mail.send", queue="a",
                   payload='{"a":[1]}')


async def _enqueue(store: RedisStorage, *names: str) -> list[EnqueueResult]:
    """Each job in its own ``aenqueue``; the results name the jobs (``IDS``' keys)."""
    out = [r for name in names for r in await store.aenqueue([_job(name)])]
    by_id = {v: k for k, v in IDS.items()}
    return [EnqueueResult(by_id[r.id], r.created) for r in out]


def test_a_connection_the_server_closed_is_replaced_for_the_next_aenqueue(
        store: RedisStorage, redis_server: Any) -> None:
    """A server restart or an idle timeout closes the pool's connections; the next call is
    made on a new one [redis-py: the pool checks a connection before handing it out]."""
    admin = redis.Redis.from_url(redis_server.url)

    async def run() -> list[EnqueueResult]:
        try:
            first = await _enqueue(store, "first")
            assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
            return first + await _enqueue(store, "second", "third")
        finally:
            await store.aclose()

    results = asyncio.run(run())
    assert [(r.id, r.created) for r in results] == [
        ("first", True), ("second", True), ("third", True)]
    assert all(store.get_job(IDS[name]) is not None for name in ("first", "second", "third"))


def test_an_aenqueue_past_its_timeout_fails_in_one_line_and_leaves_no_reply_behind(
        store: RedisStorage, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that does not answer within the socket timeout is an outage
    (``StorageUnavailable``, one line); its late reply must never be read as the answer to
    the next call [redis-py closes a connection whose read was cut short, #1128]."""
    monkeypatch.setattr(aio, "SOCKET_TIMEOUT", 0.2)
    admin = redis.Redis.from_url(redis_server.url)

    async def run() -> list[EnqueueResult]:
        try:
            await _enqueue(store, "warm")  # the queue registered, the clients made
            admin.execute_command("CLIENT", "PAUSE", "10000", "WRITE")  # scripts wait
            try:
                with pytest.raises(StorageUnavailable) as caught:
                    await _enqueue(store, "late")
            finally:
                admin.execute_command("CLIENT", "UNPAUSE")
            assert "\n" not in str(caught.value)
            return await _enqueue(store, "next", "after")
        finally:
            await store.aclose()

    results = asyncio.run(run())
    assert [(r.id, r.created) for r in results] == [("next", True), ("after", True)]
    record = store.get_job(IDS["next"])
    assert record is not None and record.name == "mail.send"


def test_an_error_reply_is_raised_and_the_connection_serves_the_next_call(
        store: RedisStorage) -> None:
    """An error the server answers (here a script it does not hold, which ``_run`` answers by
    sending the script itself) is raised to the caller, and the connection that carried it
    is whole for the next call."""

    async def run() -> tuple[Any, Any]:
        try:
            client = store._async._aclient(scripts=True)
            assert isinstance(client, redis.asyncio.Redis)
            with pytest.raises(redis.exceptions.NoScriptError):
                await aio._exchange(client, "EVALSHA", "0" * 40, 0)
            echoed = await aio._exchange(client, "ECHO", "whole")
            pool = client.connection_pool
            return echoed, len(pool._available_connections)
        finally:
            await store.aclose()

    echoed, idle = asyncio.run(run())
    assert echoed == "whole" and idle == 1  # one connection served both calls
