"""Fixtures of the Redis engine's own tests: a storage on the session server, own prefix."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.core.clock import FakeClock
from conveyor.storage.redis.storage import RedisStorage, open_redis


def prefixed(url: str) -> str:
    """``url`` with a fresh key prefix, so tests never see each other's keys."""
    return f"{url}?prefix=t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(redis_server: Any) -> Iterator[RedisStorage]:
    """A Redis storage on the session's server, using the server's clock."""
    storage = open_redis(prefixed(redis_server.url))
    yield storage
    storage.close()


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock for tests that move time."""
    return FakeClock()


@pytest.fixture
def faked(redis_server: Any, clock: FakeClock) -> Iterator[RedisStorage]:
    """A Redis storage whose scripts take ``now`` from the fake clock."""
    storage = open_redis(prefixed(redis_server.url), clock)
    yield storage
    storage.close()
