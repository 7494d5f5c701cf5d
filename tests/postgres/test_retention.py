"""Retention on PostgreSQL trims in bounded batches: one ``trim`` call deletes at most
``trim_chunk`` rows per statement (each its own short transaction) and ``trim_rounds``
statements per kind of row, so a million rows past retention never become one long
transaction; repeated calls (the janitor's next passes) remove the rest.

Rows are written with SQL, dated by the server's clock, as a worker that ran for weeks
would have left them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conveyor.storage.postgres.storage import PostgresStorage, open_postgres
from conveyor.storage.postgres.upkeep import _TRIM_STATE
from conveyor.storage.retention import Retention
from tests.postgres import schema_conn

DAY = 24 * 3600.0
NOW = "extract(epoch from clock_timestamp())"


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStorage]:
    storage = open_postgres(f"{postgres_server.url}?schema=r{uuid.uuid4().hex[:10]}")
    storage._upkeep.trim_chunk = 3  # a bound of 3 x 2 = 6 rows per kind and call
    storage._upkeep.trim_rounds = 2
    yield storage
    storage.close()


def _jobs(conn: psycopg.Connection[Any], prefix: str, state: str, count: int,
          age_days: float) -> None:
    """``count`` jobs in ``state`` whose finished_at (and every other time) is that old."""
    conn.execute(
        "INSERT INTO jobs (id, name, queue, payload, state, created_at, ready_at, finished_at) "
        f"SELECT %s || g, 't.x', 'default', '[]', %s, {NOW} - %s, {NOW} - %s, {NOW} - %s "
        "FROM generate_series(1, %s) AS g",
        (prefix, state, age_days * DAY, age_days * DAY, age_days * DAY, count))


def _ids(conn: psycopg.Connection[Any], table: str = "jobs") -> set[str]:
    return {row[0] for row in conn.execute(f"SELECT id FROM {table}")}


def test_one_call_removes_at_most_its_bound_and_repeated_calls_remove_all(
        store: PostgresStorage) -> None:
    with schema_conn(store) as conn:
        _jobs(conn, "old", "succeeded", 10, age_days=3)
        _jobs(conn, "recent", "succeeded", 4, age_days=0.5)
        for live in ("pending", "active", "scheduled", "retrying"):
            # a live job never has finished_at; one that did must still never be trimmed
            _jobs(conn, live, live, 2, age_days=30)
        kept = _ids(conn) - {f"old{i}" for i in range(1, 11)}
        retention = Retention(succeeded_seconds=DAY)
        assert store.trim(retention) == 6
        assert len(_ids(conn) - kept) == 4
        assert store.trim(retention) == 4
        assert store.trim(retention) == 0
        assert _ids(conn) == kept


def test_each_finished_state_has_its_own_bound(store: PostgresStorage) -> None:
    """A flood of succeeded jobs does not hold back the trimming of the other states."""
    with schema_conn(store) as conn:
        _jobs(conn, "ok", "succeeded", 8, age_days=3)
        _jobs(conn, "bad", "failed", 2, age_days=3)
        assert store.trim(Retention(succeeded_seconds=DAY, failed_seconds=DAY)) == 8
        left = _ids(conn)
        assert len(left) == 2 and all(i.startswith("ok") for i in left)


def test_dead_max_is_bounded_too_and_keeps_the_newest(store: PostgresStorage) -> None:
    with schema_conn(store) as conn:
        for i in range(10):  # dead{i}: i days old, within the dead retention
            _jobs(conn, f"dead{i}-", "dead", 1, age_days=i)
        retention = Retention(dead_max=2)
        assert store.trim(retention) == 6
        assert store.trim(retention) == 2
        assert store.trim(retention) == 0
        assert _ids(conn) == {"dead0-1", "dead1-1"}


def test_a_row_locked_by_another_transaction_is_skipped_not_waited_for(
        store: PostgresStorage) -> None:
    with schema_conn(store) as conn, schema_conn(store) as holder:
        _jobs(conn, "old", "succeeded", 2, age_days=3)
        with holder.transaction():
            holder.execute("SELECT 1 FROM jobs WHERE id = 'old1' FOR UPDATE")
            assert store.trim(Retention(succeeded_seconds=DAY)) == 1
        assert _ids(conn) == {"old1"}
        assert store.trim(Retention(succeeded_seconds=DAY)) == 1


def test_finished_batches_are_trimmed_in_bounded_batches(store: PostgresStorage) -> None:
    with schema_conn(store) as conn:
        conn.execute(
            "INSERT INTO batches (id, created_at, finished_at, closed, total, n_succeeded) "
            f"SELECT 'b' || g, {NOW} - 9 * 86400, {NOW} - 8 * 86400, true, 1, 1 "
            "FROM generate_series(1, 8) AS g")
        conn.execute(
            "INSERT INTO batches (id, created_at, finished_at, closed, total, n_succeeded) "
            f"VALUES ('fresh', {NOW}, {NOW}, true, 1, 1), ('open', {NOW} - 9 * 86400, NULL, "
            "false, 1, 0)")
        retention = Retention(batch_seconds=DAY)
        store.trim(retention)
        assert len(_ids(conn, "batches")) == 4
        store.trim(retention)
        assert _ids(conn, "batches") == {"fresh", "open"}


def test_trimming_a_state_walks_the_finished_jobs_index(store: PostgresStorage) -> None:
    """On a table of a million finished jobs, a batch reads its rows on ``jobs_done`` oldest
    first, not by scanning the table: checked on the generic plan, which a connection's
    prepared statement ends up using."""
    with schema_conn(store) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        statement = _TRIM_STATE.format(state="succeeded").replace("%s", "$1", 1)
        conn.execute(f"PREPARE t(float8, int) AS {statement.replace('%s', '$2')}")
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN EXECUTE t(0, 10)"))
    assert "jobs_done" in plan and "Seq Scan" not in plan, plan


def test_closed_breakers_whose_errors_left_their_window_are_dropped(
        store: PostgresStorage) -> None:
    """A closed breaker with no error left in its window is the same as none (storage/
    breakers.py ``forgettable``): an ack of its key forgets it, and trimming drops those no
    job acks any more, so keys used once do not pile up. Open breakers and closed ones with
    a recent error stay."""
    with schema_conn(store) as conn:
        conn.execute(
            "INSERT INTO breakers (key, state, failures, within) "
            f"SELECT 'stale' || g, 'closed', ARRAY[{NOW} - 120], 60 "
            "FROM generate_series(1, 8) AS g")
        conn.execute(
            "INSERT INTO breakers (key, state, failures, within, opened_at, probe_at) VALUES "
            f"('recent', 'closed', ARRAY[{NOW} - 120, {NOW} - 10], 60, NULL, NULL), "
            f"('open', 'open', ARRAY[{NOW} - 120], 60, {NOW} - 120, {NOW} + 30)")
        store.trim(Retention())
        assert len(_keys(conn)) == 4  # bounded: 6 of the 8 dropped
        store.trim(Retention())
        assert _keys(conn) == {"recent", "open"}


def _keys(conn: psycopg.Connection[Any]) -> set[str]:
    return {row[0] for row in conn.execute("SELECT key FROM breakers")}
