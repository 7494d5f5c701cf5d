"""Acks carried with a lease on one Redis server: written ahead of the lease in one write.

The rule every store keeps is in tests/conformance/test_carried_acks.py; here, what makes it
one round trip on Redis (issue 53): ack.lua's call goes in the same write as dequeue.lua's,
and ahead of the ``BLPOP`` of an idle worker's wait, so the ack never waits behind the pop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from conveyor.core.job import Ack, FlowControl, Outcome
from conveyor.storage.redis.storage import RedisStorage
from tests.conformance.helpers import put, take, take_one


def spy_writes(store: RedisStorage, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each write sent to the server, as the names of its commands (a script by its name)."""
    for name in ("ack", "dequeue"):  # cached, as on a server that ran them before
        store.link.raw("SCRIPT", "LOAD", store.scripts.scripts[name].source)
    names = {script.sha: name for name, script in store.scripts.scripts.items()}
    writes: list[list[str]] = []
    exchange = store.link._exchange

    def recording(commands: Sequence[Sequence[Any]], *args: Any, **kwargs: Any) -> Any:
        writes.append([names.get(str(c[1]), str(c[0])) if c[0] == "EVALSHA" else str(c[0])
                       for c in commands])
        return exchange(commands, *args, **kwargs)

    monkeypatch.setattr(store.link, "_exchange", recording)
    return writes


def _one_done_one_waiting(store: RedisStorage) -> tuple[Ack, str]:
    """A leased job's ack, and the id of a job waiting behind it."""
    done = put(store)
    job = take_one(store)
    return Ack(done, job.token, Outcome.SUCCEEDED), put(store)


def test_the_acks_and_the_lease_travel_in_one_write(
        store: RedisStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    ack, waiting = _one_done_one_waiting(store)
    writes = spy_writes(store, monkeypatch)
    got = store.dequeue(["default"], "w1", 1, 30.0, acks=[ack])
    assert [j.id for j in got] == [waiting] and got.acked == [True]
    assert writes == [["ack", "dequeue"]]


def test_a_waiting_lease_writes_the_acks_ahead_of_the_blocking_pop(
        store: RedisStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    ack, waiting = _one_done_one_waiting(store)
    writes = spy_writes(store, monkeypatch)
    got = store.wait_dequeue(["default"], ["default"], "w1", 1, 30.0, 5.0, acks=[ack])
    assert [j.id for j in got] == [waiting] and got.acked == [True]
    assert writes == [["ack", "BLPOP", "dequeue"]]


def test_a_slot_freed_by_an_ack_whose_script_was_flushed_is_still_leased_by_the_call(
        store: RedisStorage) -> None:
    """A server that lost its scripts (restart, failover) answers the carried ack NOSCRIPT:
    it is applied after the lease it came with, and what it freed is leased then."""
    limit = FlowControl(concurrency_key="tenant", concurrency_limit=1)
    first = put(store, flow=limit)
    second = put(store, flow=limit)
    running = take_one(store)
    assert running.id == first and take(store) == []
    store.link.raw("SCRIPT", "FLUSH")
    got = store.dequeue(["default"], "w1", 5, 30.0,
                        acks=[Ack(first, running.token, Outcome.SUCCEEDED)])
    assert [j.id for j in got] == [second] and got.acked == [True]
