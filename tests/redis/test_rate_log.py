"""The Redis rate log (``rates``/``rate_ends`` zsets of a queue, ``lua/_rates.lua``): it holds at
most ``rate_limit`` starts per key in use, forgets a key once its window has run out, and
works on the server's own ``TIME`` (the production path the conformance suite's fake clock
does not take)."""

from __future__ import annotations

from typing import Any

import redis
from conveyor.core.clock import FakeClock
from conveyor.core.job import FlowControl, JobSpec
from conveyor.storage.redis.storage import RedisStorage


def _put(store: RedisStorage, n: int, key: str, limit: int, period: float) -> None:
    flow = FlowControl(rate_key=key, rate_limit=limit, rate_period=period)
    store.enqueue([JobSpec(id=f"{key}{i}", name="t", queue="q", payload="{}", flow=flow)
                   for i in range(n)])


def _log_sizes(store: RedisStorage, client: Any) -> tuple[int, int]:
    qk = store.keys.queue("q")
    return int(client.zcard(qk.rates)), int(client.zcard(qk.rate_ends))


def test_the_log_keeps_only_starts_in_the_window_and_forgets_idle_keys(
    faked: RedisStorage, clock: FakeClock, redis_server: Any
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    _put(faked, 6, "a", 2, 10.0)
    _put(faked, 1, "b", 1, 10.0)
    assert len(faked.dequeue(["q"], "w", 10, 30)) == 3  # a0, a1, b0
    assert _log_sizes(faked, client) == (3, 2)
    for _ in range(2):
        clock.advance(10)  # a's two starts leave the window; two more take their places
        assert len(faked.dequeue(["q"], "w", 10, 30)) == 2
        assert _log_sizes(faked, client)[0] <= 3  # b0, or not, and a's newest two
    clock.advance(11.5)  # every window ended more than a second ago
    assert faked.dequeue(["q"], "w", 10, 30) == []
    assert _log_sizes(faked, client) == (0, 0)
    client.close()


def test_the_window_on_the_servers_clock(store: RedisStorage, redis_server: Any) -> None:
    client = redis.Redis.from_url(redis_server.url)
    _put(store, 3, "slow", 1, 3600.0)
    assert [j.id for j in store.dequeue(["q"], "w", 10, 30)] == ["slow0"]
    assert store.dequeue(["q"], "w", 10, 30) == []  # the next start is an hour away
    assert _log_sizes(store, client) == (1, 1)
    client.close()
