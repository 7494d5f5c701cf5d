"""Caller-chosen ids on Redis (``enqueue.taken``): what the conformance suite's
``test_chosen_ids.py`` cannot see. Each queue keeps its ids in its own slot, so an id
another queue holds is looked up before the scripts run — for a caller-chosen id only: a
generated id (``ids.generated``) makes no lookup at all, on the one-by-one, bulk and
asyncio paths (the per-job cost of plain jobs is tracked: issue 53)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import redis
from conveyor.core.ids import new_id, new_ids
from conveyor.core.job import JobSpec
from conveyor.storage.blocks import JobBlock
from conveyor.storage.redis.storage import RedisStorage


def _spec(queue: str, job_id: str) -> JobSpec:
    return JobSpec(id=job_id, name="t", queue=queue, payload='{"a":[],"k":{}}')


def _client_commands(store: RedisStorage, redis_server: Any, act: Any) -> list[str]:
    """The commands ``store``'s client sends (not its scripts') while ``act()`` runs."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    marker = f"end-{uuid.uuid4().hex}"
    seen = []
    with client.monitor() as monitor:
        act()
        client.echo(marker)
        while marker not in (command := monitor.next_command())["command"]:
            if command["client_type"] != "lua" and store.settings.prefix in command["command"]:
                seen.append(command["command"].split(" ", 1)[0].upper())
    return seen


def test_a_generated_id_makes_no_lookup_a_chosen_one_does(
        store: RedisStorage, redis_server: Any) -> None:
    """Two queues known, so a lookup would show as HMGETs on the other queue's keys."""
    store.enqueue([_spec("a", new_id()), _spec("b", new_id())])

    def generated() -> None:
        store.enqueue([_spec("a", new_id())])
        store.enqueue([_spec("a", new_id()), _spec("b", new_id())])
        ids = new_ids(3)
        store.enqueue_block(JobBlock(name="t", queue="a", ids=ids, payloads=["{}"] * 3))
        asyncio.run(store.aenqueue([_spec("b", new_id())]))

    plain = _client_commands(store, redis_server, generated)
    # scripts only (EVAL: the asyncio client loading one); the watch saw them
    assert plain and set(plain) <= {"EVALSHA", "EVAL"}
    chosen = _client_commands(store, redis_server,
                              lambda: store.enqueue([_spec("a", "order-1")]))
    assert "HMGET" in chosen


def test_asyncio_leaves_out_an_id_another_queue_holds(store: RedisStorage) -> None:
    """``aenqueue`` of a chosen id takes the blocking path, which looks the id up."""
    assert store.enqueue([_spec("a", "order-2")])[0].created
    [again] = asyncio.run(store.aenqueue([_spec("b", "order-2")]))
    assert (again.id, again.created) == ("order-2", False)
    record = store.get_job("order-2")
    assert record is not None and record.queue == "a"
    assert store.count_jobs(queue="b") == 0
