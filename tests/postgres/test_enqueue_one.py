"""``enqueue_one`` (migration 5), the lean call for one job without flow control, stores
what the generic ``enqueue`` function stores for the same job: the row, its event line, the
queue, the batch counters, and the same answer for an id already stored or a bad batch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, JobSpec
from conveyor.errors import BatchClosedError, BatchNotFound
from conveyor.storage.blocks import JobBlock
from conveyor.storage.postgres.storage import PostgresStorage, open_postgres
from tests.postgres import schema_conn

# every column but the identity, with the event log's lines
_ROW = ("SELECT name, queue, payload, state, attempt, errors, recoveries, max_retries, timeout, "
        "deadline, created_at, run_at, ready_at, started_at, finished_at, batch_id, "
        "concurrency_limit, rate_limit, rate_period, gated, flow, unique_key, events, "
        "(SELECT count(*) FROM queues WHERE name = jobs.queue) FROM jobs WHERE id = %s")
_GENERIC = ("SELECT * FROM enqueue(%s, ARRAY[%s], ARRAY[%s], ARRAY[%s], ARRAY[%s], "
            "ARRAY[%s]::int4[], ARRAY[%s]::float8[], ARRAY[%s]::float8[], ARRAY[%s]::float8[], "
            "ARRAY[%s], NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
_ONE = "SELECT * FROM enqueue_one(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStorage]:
    storage = open_postgres(f"{postgres_server.url}?schema=e{uuid.uuid4().hex[:10]}",
                            clock=FakeClock(1_000.0))
    storage.create_batch(BatchSpec(id="b1"))
    yield storage
    storage.close()


@pytest.mark.parametrize("fields", [
    {}, {"max_retries": 3, "timeout": 2.5, "deadline": 5_000.0},
    {"run_at": 2_000.0}, {"run_at": 10.0}, {"batch_id": "b1"},
    {"batch_id": "b1", "run_at": 2_000.0}, {"queue": "other"},
])
def test_one_job_is_stored_as_the_generic_function_stores_it(
        store: PostgresStorage, fields: dict[str, Any]) -> None:
    args: dict[str, Any] = {"name": "t.x", "queue": "default", "payload": '[1, "é"]',
                            "max_retries": None, "timeout": None, "deadline": None,
                            "run_at": None, "batch_id": None, **fields}
    values = [args[k] for k in ("name", "queue", "payload", "max_retries", "timeout",
                                "deadline", "run_at", "batch_id")]
    with schema_conn(store) as conn:
        generic = conn.execute(_GENERIC, (1_000.0, "g", *values)).fetchall()
        lean = conn.execute(_ONE, (1_000.0, "l", *values)).fetchall()
        assert lean == [("l", True, None)] and generic == [("g", True, None)]
        assert conn.execute(_ROW, ("l",)).fetchone() == conn.execute(_ROW, ("g",)).fetchone()
        # the same id again: stored already, not created, nothing changed
        assert conn.execute(_ONE, (1_500.0, "l", *values)).fetchall() == [("l", False, None)]
        assert conn.execute(_ROW, ("l",)).fetchone() == conn.execute(_ROW, ("g",)).fetchone()
    if args["batch_id"]:
        status = store.get_batch("b1")
        assert status is not None and status.total == 2


def test_a_missing_or_finished_batch_is_refused_as_by_enqueue(store: PostgresStorage) -> None:
    with pytest.raises(BatchNotFound):
        store.enqueue([JobSpec(id="a", name="t.x", queue="q", payload="[]", batch_id="nope")])
    store.create_batch(BatchSpec(id="done"))
    store.close_batch("done")
    with pytest.raises(BatchClosedError):
        store.enqueue([JobSpec(id="b", name="t.x", queue="q", payload="[]", batch_id="done")])
    assert store.get_job("a") is None and store.get_job("b") is None


def test_the_storage_enqueues_one_plain_job_without_the_generic_function(
        store: PostgresStorage) -> None:
    with schema_conn(store) as conn:  # gone: a call of it would fail
        conn.execute("ALTER FUNCTION enqueue RENAME TO enqueue_gone")
    store.enqueue([JobSpec(id="a", name="t.x", queue="q", payload="[]")])
    store.enqueue_block(JobBlock(name="t.x", queue="q", ids=["b"], payloads=["[]"]))
    assert store.get_job("a") is not None and store.get_job("b") is not None
