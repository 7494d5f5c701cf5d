"""Vacuuming the jobs table when dead row versions pile up (``PostgresStorage.tidy``).

A lease walks ``jobs_ready`` from its oldest entry, and the entries of every job leased since
the last VACUUM are still there. Autovacuum looks at a database once a minute
(``autovacuum_naptime``): at thousands of jobs a second that leaves hundreds of thousands of
them, and a long drain slowed down as it went. ``tidy()``, which every worker's janitor calls
each second, vacuums the table itself once they pass a bound.

Dead rows are made here with SQL on a connection of the test's own, which then flushes its
statistics at once (``pg_stat_force_next_flush``), so the counts ``tidy`` reads are current.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor
from conveyor.core.job import JobState
from conveyor.storage.postgres.connection import parse_postgres_url
from conveyor.storage.postgres.storage import PostgresStorage, open_postgres
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.postgres import schema_conn
from tests.support.waiting import wait_until

BOUND = 200  # the test stores' tidy_dead


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStorage]:
    storage = open_postgres(f"{postgres_server.url}?schema=t{uuid.uuid4().hex[:10]}")
    storage._vacuum.tidy_dead = BOUND
    yield storage
    storage.close()


def _churn(conn: psycopg.Connection[Any], rows: int) -> None:
    """``rows`` jobs written, then each updated twice: ``2 * rows`` dead row versions."""
    tag = uuid.uuid4().hex[:6]
    conn.execute(
        "INSERT INTO jobs (id, name, queue, payload, state, created_at, ready_at) "
        "SELECT %s || g, 't.x', 'default', '[]', 'succeeded', 0, 0 "
        "FROM generate_series(1, %s) AS g", (tag, rows))
    for step in ("a", "b"):
        conn.execute("UPDATE jobs SET progress = %s WHERE id LIKE %s", (step, f"{tag}%"))
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")  # the flush happens when the statement before it ends


def _stats(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(VACUUMs run by hand, dead row versions) of the schema's jobs table."""
    row = conn.execute("SELECT vacuum_count, n_dead_tup FROM pg_stat_user_tables "
                       "WHERE relid = 'jobs'::regclass").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_table_with_few_dead_rows_is_left_alone(store: PostgresStorage) -> None:
    with schema_conn(store) as conn:
        _churn(conn, BOUND // 4)
        assert 0 < _stats(conn)[1] < BOUND
        assert store.tidy() is False
        assert _stats(conn)[0] == 0


def test_dead_rows_past_the_bound_are_vacuumed(store: PostgresStorage) -> None:
    with schema_conn(store) as conn:
        _churn(conn, BOUND)
        assert _stats(conn) >= (0, BOUND)
        assert store.tidy() is True
        vacuums, dead = _stats(conn)
        assert vacuums == 1 and dead < BOUND


def test_vacuum_0_in_the_url_leaves_vacuum_to_autovacuum(postgres_server: Any) -> None:
    other = open_postgres(f"{postgres_server.url}?schema=t{uuid.uuid4().hex[:10]}&vacuum=0")
    other._vacuum.tidy_dead = BOUND
    try:
        with schema_conn(other) as conn:
            _churn(conn, BOUND)
            assert _stats(conn)[1] >= BOUND
            assert other.tidy() is False and _stats(conn)[0] == 0
    finally:
        other.close()


def test_a_vacuum_an_old_snapshot_holds_back_is_not_repeated_at_once(
        store: PostgresStorage) -> None:
    """A transaction that keeps an old snapshot (a long report, an idle session left in a
    transaction) keeps VACUUM from removing what it may still see: vacuuming again every
    second would scan the table and its indexes for nothing. The next try waits, longer
    each time it finds them still there, and comes once the snapshot is gone."""
    ticks = Ticks()
    store._vacuum._tidy_clock = ticks
    with schema_conn(store) as conn, schema_conn(store) as holder:
        holder.autocommit = False
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM jobs")  # its snapshot predates the churn
        _churn(conn, BOUND)
        assert store.tidy() is True
        assert _stats(conn) >= (1, BOUND)  # vacuumed, and nothing could go
        ticks.t += 1.0
        assert store.tidy() is False and _stats(conn)[0] == 1
        ticks.t += 3600.0
        assert store.tidy() is True and _stats(conn)[0] == 2  # still held: tried again
        holder.rollback()
        ticks.t += 3600.0
        assert store.tidy() is True
        vacuums, dead = _stats(conn)
        assert vacuums == 3 and dead < BOUND


def test_a_role_that_does_not_own_the_table_leaves_vacuum_to_autovacuum(
        store: PostgresStorage) -> None:
    """VACUUM is the owner's: another role's would only draw a warning each second."""
    settings = store._db.settings
    role = f"worker_{uuid.uuid4().hex[:8]}"
    with schema_conn(store) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f'GRANT USAGE ON SCHEMA "{settings.schema}" TO {role}')
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA '
                     f'"{settings.schema}" TO {role}')
        url = store._db.settings.url.replace("postgresql://postgres@",
                                             f"postgresql://{role}@", 1)
        assert role in url
        other = open_postgres(url)
        other._vacuum.tidy_dead = BOUND
        try:
            _churn(conn, BOUND)
            assert other.tidy() is False and other.tidy() is False
            assert _stats(conn)[0] == 0
        finally:
            other.close()


def test_a_worker_tidies_as_it_drains(postgres_server: Any) -> None:
    """The janitor of every worker process calls ``tidy`` each second: a drain that leaves
    more dead rows than the bound sees the table vacuumed while it runs."""
    url = f"{postgres_server.url}?schema=w{uuid.uuid4().hex[:10]}"
    app = Conveyor(url)

    @app.job
    def noop() -> None: ...

    assert isinstance(app.storage, PostgresStorage)
    app.storage._vacuum.tidy_dead = BOUND
    refs = noop.enqueue_many([()] * (2 * BOUND))
    launcher = Launcher(app, WorkerConfig(concurrency=4))
    launcher.start()
    try:
        with psycopg.connect(parse_postgres_url(url).conninfo, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{parse_postgres_url(url).schema}"')
            assert wait_until(lambda: _stats(conn)[0] >= 1, 60.0, interval=0.1)
        assert all(app.get_job(r.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
                   for r in refs)
    finally:
        launcher.stop(5)
        app.close()
