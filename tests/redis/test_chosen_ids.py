"""Caller-chosen ids on Redis (``enqueue.taken``): what the conformance suite's
``test_chosen_ids.py`` cannot see. Each queue keeps its ids in its own slot, so an id
another queue holds is read by the script itself on one server (Cluster reads it ahead:
``enqueue.taken``) — for a caller-chosen id only: a generated id (``ids.generated``) makes
no look-up at all, on the one-by-one, bulk and asyncio paths (the per-job cost of plain
jobs is tracked: issue 53)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import redis
from conveyor.core.ids import new_id, new_ids
from conveyor.core.job import JobSpec
from conveyor.storage.blocks import JobBlock
from conveyor.storage.redis.storage import RedisStorage, open_redis


def _spec(queue: str, job_id: str) -> JobSpec:
    return JobSpec(id=job_id, name="t", queue=queue, payload='{"a":[],"k":{}}')


def _commands(store: RedisStorage, redis_server: Any, act: Any) -> list[tuple[str, str]]:
    """(who, command name) of every command on ``store``'s keys while ``act()`` runs: who
    is "lua" for its scripts' commands, else its client's."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    marker = f"end-{uuid.uuid4().hex}"
    seen = []
    with client.monitor() as monitor:
        act()
        client.echo(marker)
        while marker not in (command := monitor.next_command())["command"]:
            if store.settings.prefix in command["command"]:
                seen.append(("lua" if command["client_type"] == "lua" else "client",
                             command["command"].split(" ", 1)[0].upper()))
    return seen


def test_a_generated_id_makes_no_lookup_a_chosen_one_does(
        store: RedisStorage, redis_server: Any) -> None:
    """Two queues known, so a look-up would show: a HEXISTS in the script on the other
    queue's jobs hash (one server), or the client's HMGET (Cluster, ``enqueue.taken``)."""
    store.enqueue([_spec("a", new_id()), _spec("b", new_id())])

    def generated() -> None:
        store.enqueue([_spec("a", new_id())])
        store.enqueue([_spec("a", new_id()), _spec("b", new_id())])
        ids = new_ids(3)
        store.enqueue_block(JobBlock(name="t", queue="a", ids=ids, payloads=["{}"] * 3))
        asyncio.run(store.aenqueue([_spec("b", new_id())]))

    plain = _commands(store, redis_server, generated)
    # the client sends scripts only (EVAL: the asyncio client loading one); the watch saw them
    assert {name for who, name in plain if who == "client"} == {"EVALSHA", "EVAL"}
    assert ("lua", "HSETNX") in plain and ("lua", "HEXISTS") not in plain
    chosen = _commands(store, redis_server, lambda: store.enqueue([_spec("a", "order-1")]))
    assert ("lua", "HEXISTS") in chosen


def test_the_check_across_queues_is_one_step_with_the_write(
        store: RedisStorage, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On one server the script reads the other queues itself: another client storing the
    id in queue "a" after this call's arguments were made, right before its script runs,
    still makes it leave the job out (a look-up ahead of the script would have missed it)."""
    other = open_redis(f"{redis_server.url}?prefix={store.settings.prefix}")
    store.enqueue([_spec("a", new_id())])  # both queues known before the race
    run = store.scripts.run

    def racing(name: str, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(store.scripts, "run", run)  # once
        assert other.enqueue([_spec("a", "order-3")])[0].created
        return run(name, *args, **kwargs)

    monkeypatch.setattr(store.scripts, "run", racing)
    try:
        [late] = store.enqueue([_spec("b", "order-3")])
    finally:
        other.close()
    assert (late.id, late.created) == ("order-3", False)
    record = store.get_job("order-3")
    assert record is not None and record.queue == "a"
    assert store.count_jobs(queue="b") == 0


def test_asyncio_leaves_out_an_id_another_queue_holds(store: RedisStorage) -> None:
    """``aenqueue`` of a chosen id takes the blocking path, which looks the id up."""
    assert store.enqueue([_spec("a", "order-2")])[0].created
    [again] = asyncio.run(store.aenqueue([_spec("b", "order-2")]))
    assert (again.id, again.created) == ("order-2", False)
    record = store.get_job("order-2")
    assert record is not None and record.queue == "a"
    assert store.count_jobs(queue="b") == 0
