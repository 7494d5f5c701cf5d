"""Breakers on Redis (``lua/_breakers.lua``, ``lua/_breaker_acks.lua``, ``redis/breakers.py``):
what the conformance suite cannot see — a key counts within its queue (a script touches one
slot), the records stay bounded, a damaged record harms only its key, and a job without a
breaker makes no command on the breakers' keys (its Redis cost per job is tracked: issue 53).

The per-queue scope is the one Redis already has for concurrency, order and rate keys
(docs/flow-control.md); the bounded record is the rate log's rule (``test_rate_log.py``).
"""

from __future__ import annotations

import uuid
from typing import Any

import redis
from conveyor.core.clock import FakeClock
from conveyor.core.job import (
    Ack,
    ErrorInfo,
    FlowControl,
    JobSpec,
    JobState,
    LeasedJob,
    Outcome,
)
from conveyor.storage.outbox import StartKind
from conveyor.storage.redis.storage import RedisStorage
from conveyor.views.scaling import scale_hints

FLOW = FlowControl(breaker_key="stripe", breaker_open_after=2, breaker_within=60.0,
                   breaker_cool_down=30.0)


def _put(store: RedisStorage, queue: str, n: int, flow: FlowControl | None = FLOW) -> list[str]:
    ids = [f"{queue}-{uuid.uuid4().hex[:8]}" for _ in range(n)]
    store.enqueue([JobSpec(id=i, name="t", queue=queue, payload="{}", flow=flow) for i in ids])
    return ids


def _fail(store: RedisStorage, jobs: list[LeasedJob]) -> None:
    error = ErrorInfo(type="ConnectionError", message="refused", traceback="")
    assert store.ack([Ack(j.id, j.token, Outcome.RETRY, error=error, retry_in=600.0)
                      for j in jobs])


def test_a_key_opens_in_its_own_queue_and_closing_it_closes_every_queue(
        faked: RedisStorage) -> None:
    """A script sees one queue's slot: errors in ``a`` open ``stripe`` there only, so ``b``'s
    jobs of the same key still lease (and the scale hint counts them as work);
    ``close_breaker`` closes the key in every queue."""
    _put(faked, "a", 4)
    _put(faked, "b", 2)
    _fail(faked, faked.dequeue(["a"], "w", 2, 30))
    assert faked.dequeue(["a"], "w", 10, 30) == []  # held: open in "a"
    [state] = faked.breakers()
    assert (state.key, state.state, state.queue, state.failures) == ("stripe", "open", "a", 2)
    [held, _] = [r.id for r in faked.list_jobs(queue="a", state=JobState.PENDING)]
    facts = faked.gate_facts(held)
    assert facts is not None and facts.breaker == state  # what explain reads
    hints = {h.queue: h.workers for h in scale_hints(faked, 1, 0.0, ["a", "b"])}
    assert hints == {"a": 0, "b": 2}  # "a"'s jobs are held, "b"'s are work for a worker
    assert len(faked.dequeue(["b"], "w", 10, 30)) == 2
    assert faked.close_breaker("stripe") is True
    assert faked.breakers() == []
    assert len(faked.dequeue(["a"], "w", 10, 30)) == 2
    assert faked.close_breaker("stripe") is False  # closed everywhere already


def test_a_key_that_stopped_failing_is_forgotten(faked: RedisStorage, clock: FakeClock,
                                                 redis_server: Any) -> None:
    """One error under ``open_after`` leaves a record; once its window has passed, the next
    ack of a job with a breaker forgets it, so the hash holds only keys failing lately."""
    client = redis.Redis.from_url(redis_server.url)
    qk = faked.keys.queue("q")
    _put(faked, "q", 1)
    _fail(faked, faked.dequeue(["q"], "w", 1, 30))
    assert client.hkeys(qk.breakers) == [b"stripe"] and client.zcard(qk.breaker_ends) == 1
    clock.advance(61)
    other = FlowControl(breaker_key="other", breaker_open_after=5, breaker_within=60.0,
                        breaker_cool_down=30.0)
    _put(faked, "q", 1, other)
    [job] = faked.dequeue(["q"], "w", 1, 30)
    assert faked.ack([Ack(job.id, job.token, Outcome.SUCCEEDED)])
    assert client.hlen(qk.breakers) == 0 and client.zcard(qk.breaker_ends) == 0


def test_a_damaged_record_reads_as_closed_and_harms_no_other_key(
        faked: RedisStorage, redis_server: Any) -> None:
    """One bad input harms only itself: a record that cannot be read lets its key's jobs
    lease, as a closed key, and the reads leave it out."""
    client = redis.Redis.from_url(redis_server.url)
    qk = faked.keys.queue("q")
    _put(faked, "q", 2)
    client.hset(qk.breakers, "stripe", "open\tgarbage")
    assert faked.breakers() == []
    assert len(faked.dequeue(["q"], "w", 10, 30)) == 2


def test_a_job_without_a_breaker_makes_no_command_on_the_breakers_keys(
        store: RedisStorage, redis_server: Any) -> None:
    """The hot path of plain jobs pays a field check in Lua, no Redis command (issue 53's
    per-job cost): every command the scripts run for its enqueue, lease and ack is watched."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    marker = f"end-{uuid.uuid4().hex}"
    with client.monitor() as monitor:
        [job_id] = _put(store, "q", 1, None)
        [job] = store.dequeue(["q"], "w", 1, 30)
        assert job.id == job_id and store.ack([Ack(job.id, job.token, Outcome.SUCCEEDED)])
        client.echo(marker)
        seen = []
        while marker not in (command := monitor.next_command())["command"]:
            if command["client_type"] == "lua" and store.settings.prefix in command["command"]:
                seen.append(command["command"])
    assert any(" HSET " in f" {c} " for c in seen)  # the watch saw the scripts' writes
    assert [c for c in seen if "breaker" in c] == []


def test_with_a_broker_a_held_delivery_parks_until_its_probe_may_start(
        faked: RedisStorage, clock: FakeClock) -> None:
    """The broker's path (``start.lua``, ``publish.lua``) gates as ``dequeue.lua`` does: a
    delivery of an open key parks, is not published again while the key is held, and after
    the cool-down is due once more and starts as the probe (the outbox rule for a rate key,
    tests/conformance/test_outbox.py, applied to a breaker)."""
    _fail(faked, _leased(faked, 2))
    [held] = _put(faked, "q", 1)
    assert faked.publish_due("q", 10, 60.0) == [held]
    [reply] = faked.start("q", [(held, False)], "w", 30)
    assert reply.kind is StartKind.PARKED
    assert faked.publish_due("q", 10, 60.0) == []
    clock.advance(30)
    assert faked.publish_due("q", 10, 60.0) == [held]
    [reply] = faked.start("q", [(held, False)], "w", 30)
    assert reply.kind is StartKind.STARTED
    [state] = faked.breakers()
    assert (state.state, state.probe_id) == ("half_open", held)


def test_a_lined_job_is_held_and_probes_as_a_listed_one(faked: RedisStorage,
                                                       clock: FakeClock) -> None:
    """A job with a priority waits in its queue's lineup, which ``dequeue.lua`` walks apart
    from the list (``judge``/``take``): the breaker holds it there too, lets a job of
    another key by, and makes it the probe after the cool-down (docs/scheduling.md)."""
    _fail(faked, _leased(faked, 2))
    lined = FlowControl(priority=5, breaker_key="stripe", breaker_open_after=2,
                        breaker_within=60.0, breaker_cool_down=30.0)
    [held] = _put(faked, "q", 1, lined)
    [free] = _put(faked, "q", 1, FlowControl(priority=5))
    assert [j.id for j in faked.dequeue(["q"], "w", 10, 30)] == [free]
    clock.advance(30)
    assert [j.id for j in faked.dequeue(["q"], "w", 10, 30)] == [held]
    [state] = faked.breakers()
    assert (state.state, state.probe_id) == ("half_open", held)


def _leased(store: RedisStorage, n: int) -> list[LeasedJob]:
    _put(store, "q", n)
    return store.dequeue(["q"], "w", n, 30)
