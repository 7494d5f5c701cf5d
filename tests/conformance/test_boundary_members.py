"""The protocol members that replaced asking which backend a caller holds (issue #16 §2):
``Inspector.now``, ``Storage.check_server``, ``Storage.bind``, and one error family for a
store that cannot be used. Every caller (views, web, CLI, launcher) relies on them behaving
the same everywhere.

``wait_dequeue``, the one waiting method, has its own file (``test_wait_dequeue.py``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec
from conveyor.errors import StorageError, StorageUnavailable, TransactionUnsupported
from conveyor.storage import Backend, Inspector, open_storage
from conveyor.views.records import batch_view, stats_view, workers_view
from tests.conformance.helpers import put, take_one
from tests.support.redis_server import RedisServer


def test_inspector_now_is_the_storage_clock(backend: Backend, clock: FakeClock) -> None:
    inspector: Inspector = backend
    assert inspector.now() == clock.now()
    clock.advance(90)
    assert inspector.now() == clock.now()
    assert stats_view(inspector)["now"] == clock.now()


def test_views_measure_ages_with_the_storage_clock(backend: Backend, clock: FakeClock) -> None:
    backend.create_batch(BatchSpec(id="b1", description="d"))
    put(backend, batch_id="b1")
    take_one(backend)
    clock.advance(30)
    assert batch_view(backend, "b1")["elapsed"] == 30
    assert workers_view(backend) == []


def test_check_server_has_nothing_to_warn_about_on_a_test_store(backend: Backend) -> None:
    """The test servers keep Redis's default ``noeviction``; memory and SQLite have no
    server settings of their own to warn about. A list either way, never a missing method."""
    assert backend.check_server() == []


def test_bind_refuses_what_is_not_a_connection_to_its_database(backend: Backend) -> None:
    """Every backend answers ``bind`` (only PostgreSQL accepts a connection, to its own
    database: ``tests/postgres/test_transaction.py``); what it cannot join is one
    ``TransactionUnsupported`` line, and nothing is stored."""
    with pytest.raises(TransactionUnsupported) as info:
        backend.bind(object())
    assert len(str(info.value).splitlines()) == 1
    assert backend.count_jobs() == 0


def test_reads_of_a_sqlite_file_stripped_of_its_tables_are_unavailable(tmp_path: Path) -> None:
    """SQLite: a file another program stripped of conveyor's tables. The read raises
    ``StorageUnavailable``, not the driver's ``OperationalError``."""
    path = tmp_path / "gone.db"
    store = open_storage(f"sqlite:///{path}", FakeClock())
    try:
        put(store)
        other = sqlite3.connect(path)
        other.execute("DROP TABLE jobs")
        other.commit()
        other.close()
        with pytest.raises(StorageUnavailable, match="no such table"):
            store.count_jobs()
        with pytest.raises(StorageUnavailable, match="no such table"):
            store.queues()
        with pytest.raises(StorageUnavailable, match="no such table"):
            store.dequeue(["default"], "w", 1, 30.0)
    finally:
        store.close()


@pytest.mark.usefixtures("redis_server")  # skips with the rest when redis-server is missing
def test_reads_of_a_redis_that_went_away_are_unavailable() -> None:
    with RedisServer() as server:
        store = open_storage(f"{server.url}?prefix=gone", FakeClock())
        try:
            put(store)
            server.stop()
            with pytest.raises(StorageUnavailable, match="unreachable"):
                store.count_jobs()
        finally:
            store.close()


@pytest.mark.parametrize("kind", ["redis_server", "redis_cluster"])
def test_an_error_reply_is_a_storage_error_not_an_outage(
        kind: str, request: pytest.FixtureRequest) -> None:
    """A damaged registry key (another type than conveyor wrote) makes Redis answer with an
    error: ``StorageError`` naming the server, and not ``StorageUnavailable`` (the acker
    retries an outage whole but writes a refused batch apart)."""
    server = request.getfixturevalue(kind)
    store = open_storage(f"{server.url}?prefix=damaged{kind}", FakeClock())
    try:
        put(store)
        store.link.client.set(store.keys.queues, "not a set")  # type: ignore[attr-defined]
        with pytest.raises(StorageError, match="answered with an error") as raised:
            store.queues()
        assert not isinstance(raised.value, StorageUnavailable)
    finally:
        store.link.client.delete(store.keys.queues)  # type: ignore[attr-defined]
        store.close()
