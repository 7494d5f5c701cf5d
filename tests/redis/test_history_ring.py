"""The per-minute history on Redis: a ring of at most a day of fields per queue
(lua/_counts.lua), so nothing to trim; a damaged field is skipped, not an error."""

from __future__ import annotations

from typing import Any

from conveyor.core.clock import FakeClock
from conveyor.storage import open_storage
from conveyor.storage.redis.storage import RedisStorage
from conveyor.storage.totals import minute_of
from tests.conformance.helpers import ack, outcome_a_day, put, take_one
from tests.redis.conftest import prefixed


def test_redis_ring_holds_a_day_and_skips_a_damaged_field(redis_server: Any) -> None:
    clock = FakeClock()
    store = open_storage(prefixed(redis_server.url), clock)
    assert isinstance(store, RedisStorage)
    try:
        outcome_a_day(store, clock)
        ring = store.keys.queue("hist").history
        assert store.link.call("HLEN", ring) == 1  # the same minute of three days: one field
        clock.advance(60)
        put(store, "hist")
        assert ack(store, take_one(store, ["hist"]))
        store.link.call("HSET", ring, "7", "not a minute")
        assert [(r.minute, r.processed) for r in store.history()] == [
            (minute_of(clock.now()) - 1, 1), (minute_of(clock.now()), 1)]
    finally:
        store.close()
