"""A session the server ended while it sat idle is replaced before it is used.

After a PostgreSQL restart, a failover or ``pg_terminate_backend``, each thread's idle
connection holds the server's last words (FATAL 57P01/57P02) or EOF, unread. Used as is, the
first call on it fails: a durable job's step save raised ``StorageUnavailable`` and spent an
attempt, retried 20-30 s later by its backoff (scenario 38 took 33 s for a 1 s restart). Pools
of the field check a connection before lending it (psycopg_pool's ``check``, SQLAlchemy's
``pool_pre_ping``, pgx's ping after idle); here the check costs no round trip: the socket of
an idle session is only readable when the server said something, and libpq then says whether
the session survives it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conveyor.storage.postgres.connection import Connections, parse_postgres_url
from tests.support.waiting import wait_until


@pytest.fixture
def admin(postgres_server: Any) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def db(postgres_server: Any) -> Iterator[Connections]:
    settings = parse_postgres_url(f"{postgres_server.url}?schema=d{uuid.uuid4().hex[:12]}")
    connections = Connections(settings)
    try:
        yield connections
    finally:
        connections.close()


def _terminate(admin: psycopg.Connection[Any], pid: int) -> None:
    row = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
    assert row == (True,)
    # wait until the backend has gone, so its FATAL is on the socket before the next call
    wait_until(lambda: admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                     (pid,)).fetchone() is None, 30, what="the backend to exit")


def test_a_terminated_idle_session_is_replaced_before_its_next_call(
        db: Connections, admin: psycopg.Connection[Any]) -> None:
    with db.call() as cur:
        first = cur.execute("SELECT pg_backend_pid()").fetchone()
    assert first is not None
    _terminate(admin, first[0])
    with db.call() as cur:  # raised StorageUnavailable ("terminating connection …") before
        second = cur.execute("SELECT pg_backend_pid()").fetchone()
    assert second is not None and second[0] != first[0]


def test_every_thread_replaces_its_own_dropped_session(
        db: Connections, admin: psycopg.Connection[Any]) -> None:
    """Each job thread keeps its own connection: after a restart every one of them is dead,
    and each thread's next call must still succeed."""
    before: dict[int, int] = {}
    after: dict[int, int] = {}
    errors: list[BaseException] = []
    used, terminated = threading.Barrier(4), threading.Event()

    def backend() -> int:
        with db.write() as cur:
            row = cur.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])

    def use(slot: int) -> None:
        try:
            before[slot] = backend()
            used.wait(30)
            assert terminated.wait(30)
            after[slot] = backend()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=use, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    used.wait(30)
    for pid in before.values():
        _terminate(admin, pid)
    terminated.set()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert len(set(before.values())) == 3
    assert set(after.values()).isdisjoint(before.values()) and len(after) == 3


def test_a_live_idle_session_is_kept(db: Connections) -> None:
    """The check replaces only dropped sessions: a healthy one is used again as is."""
    with db.call() as cur:
        first = cur.execute("SELECT pg_backend_pid()").fetchone()
    with db.call() as cur:
        second = cur.execute("SELECT pg_backend_pid()").fetchone()
    assert first == second
