"""The server-side functions serve any connection: ``jobs.insert`` on a caller's own
connection (no conveyor ``search_path``) enqueues in that connection's transaction, so the
job exists if and only if the transaction commits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conveyor.core.job import JobSpec
from conveyor.storage.postgres import arrays, jobs
from conveyor.storage.postgres.storage import PostgresStorage, open_postgres


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStorage]:
    storage = open_postgres(f"{postgres_server.url}?schema=f{uuid.uuid4().hex[:10]}")
    yield storage
    storage.close()


def test_insert_on_a_callers_connection_follows_its_transaction(
        store: PostgresStorage, postgres_server: Any) -> None:
    schema = store._db.settings.schema
    kept = JobSpec(id="kept", name="t.x", queue="default", payload="[]")
    dropped = JobSpec(id="dropped", name="t.x", queue="default", payload="[]")
    with psycopg.connect(postgres_server.url) as conn:  # search_path: public only
        with conn.transaction(), conn.cursor() as cur:
            assert [r.created for r in jobs.insert(cur, None, [kept], schema)] == [True]
        with pytest.raises(RuntimeError), conn.transaction(), conn.cursor() as cur:
            jobs.insert(cur, None, [dropped], schema)
            raise RuntimeError("the application's transaction fails")
    assert store.get_job("kept") is not None
    assert store.get_job("dropped") is None
    assert [job.id for job in store.dequeue(["default"], "w1", 5, 30.0)] == ["kept"]


def test_array_literals_read_back_as_the_values_written(store: PostgresStorage) -> None:
    """The functions' array arguments are sent as literals (``arrays.py``): every text reads
    back as written, quotes, backslashes, braces, commas and the word NULL included."""
    words = ['plain', '', 'NULL', None, 'a "quoted" word', 'back\\slash\\', '{brace},comma',
             'line\nbreak', 'üñí ✓', '\\"', ' spaced ']
    numbers = [0.1, None, -2.5e-300, 1e300, 3.0, float("inf")]
    with store._db.call() as cur:
        row = cur.execute(
            "SELECT %s::text[], %s::float8[], %s::int4[], %s::bool[]",
            (arrays.texts(words), arrays.floats(numbers), arrays.ints([1, None, -7]),
             arrays.bools([True, None, False]))).fetchone()
    assert row == (words, numbers, [1, None, -7], [True, None, False])
    with store._db.call() as cur:
        empty = cur.execute("SELECT %s::text[]", (arrays.texts([]),)).fetchone()
    assert empty == ([],)
