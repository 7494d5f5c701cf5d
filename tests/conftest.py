"""Session-wide fixtures: real redis-server processes started on free ports in temp dirs.

Nothing here touches a Redis a developer already runs: every server is our own, and every test
uses its own key prefix, so no test ever flushes a database.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.redis_server import RedisCluster, RedisServer, redis_server_binary

pytest_plugins = ["tests.support.ci_skips"]  # CI=true: unexpected skips fail


def _skip_without_redis() -> None:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (make test installs Debian's redis-server)")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Any]:
    """One real redis-server for the whole session."""
    _skip_without_redis()
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Any]:
    """One real local 3-master Redis Cluster for the whole session."""
    _skip_without_redis()
    with RedisCluster(masters=3) as cluster:
        yield cluster
