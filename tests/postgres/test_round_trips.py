"""Each hot-path transition on PostgreSQL is one round trip to the server: a call of a
server-side function (storage/postgres/functions/), no BEGIN/COMMIT around it and no clock
read of its own. Counted on the wire: libpq's trace of the connection lists every message
each side sends, and a round trip is the client sending messages and then waiting for the
server's answer before it sends more."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conveyor.core.job import Ack, BatchSpec, JobSpec, Outcome
from conveyor.storage.postgres.storage import PostgresStorage, open_postgres
from conveyor.storage.workers import WorkerInfo


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStorage]:
    storage = open_postgres(f"{postgres_server.url}?schema=r{uuid.uuid4().hex[:10]}")
    yield storage
    storage.close()


def round_trips(store: PostgresStorage, tmp_path: Path, call: Callable[[], object],
                conn: psycopg.Connection[Any] | None = None) -> int:
    """How many round trips ``call`` makes on this thread's connection (or on ``conn``)."""
    conn = conn or store._db.conn()
    path = tmp_path / f"trace-{uuid.uuid4().hex}"
    with path.open("w") as out:
        conn.pgconn.trace(out.fileno())
        try:
            call()
        finally:
            conn.pgconn.untrace()
    # A round trip: messages sent, then the answers awaited (pipelined statements whose
    # answers are read before the next are sent count once per wait).
    sides = [fields[1] for fields in (line.split("\t") for line in path.read_text().splitlines())
             if len(fields) > 3]
    return sum(1 for sent, got in pairwise(sides) if sent == "F" and got == "B")


def spec(n: int, batch_id: str | None = None) -> JobSpec:
    return JobSpec(id=f"job{n:05d}{uuid.uuid4().hex[:8]}", name="t.noop", queue="default",
                   payload='{"a":[],"k":{}}', batch_id=batch_id)


def test_dequeue_and_ack_of_many_jobs_are_one_round_trip_each(
        store: PostgresStorage, tmp_path: Path) -> None:
    store.create_batch(BatchSpec(id="b1"))
    store.enqueue([spec(i, batch_id="b1" if i % 2 else None) for i in range(60)])
    for _ in range(6):  # past psycopg's prepare threshold: steady state
        leased = store.dequeue(["other", "default"], "w1", 2, 30.0)
        store.ack([Ack(job.id, job.token, Outcome.SUCCEEDED) for job in leased])
    got: list[Any] = []
    assert round_trips(store, tmp_path, lambda: got.extend(
        store.dequeue(["other", "default"], "w1", 20, 30.0))) == 1
    assert len(got) == 20
    acks = [Ack(job.id, job.token, Outcome.SUCCEEDED if i % 3 else Outcome.RETRY,
                retry_in=5.0) for i, job in enumerate(got)]
    acks.append(Ack(got[0].id, "stale-token", Outcome.FAILED))  # refused, same round trip
    applied: list[bool] = []
    assert round_trips(store, tmp_path, lambda: applied.extend(store.ack(acks))) == 1
    assert applied == [True] * 20 + [False]


def test_enqueue_and_heartbeat_are_one_round_trip_each(
        store: PostgresStorage, tmp_path: Path) -> None:
    info = WorkerInfo(id="w1", hostname="h", pid=1, queues=("default",), concurrency=4,
                      started_at=0.0)
    for i in range(6):
        store.enqueue([spec(i)])
        store.heartbeat(info, {}, 30.0)
    assert round_trips(store, tmp_path, lambda: store.enqueue([spec(100 + i)
                                                              for i in range(50)])) == 1
    leased = store.dequeue(["default"], "w1", 3, 30.0)
    assert round_trips(store, tmp_path, lambda: store.heartbeat(
        info, {job.id: job.token for job in leased}, 30.0)) == 1


def test_an_enqueue_in_the_applications_transaction_is_one_round_trip(
        store: PostgresStorage, tmp_path: Path) -> None:
    """On the application's connection: one statement naming conveyor's schema, no
    search_path set and put back around it; the application's path is as it was."""
    with psycopg.connect(store._db.settings.conninfo) as conn, conn.transaction():
        conn.execute("SET LOCAL search_path TO public")
        bound = store.bind(conn)
        for i in range(6):
            bound.enqueue([spec(i)])
        assert round_trips(store, tmp_path, lambda: bound.enqueue([spec(100)]), conn) == 1
        row = conn.execute("SHOW search_path").fetchone()
        assert row is not None and row[0] == "public"
    assert store.count_jobs() == 7
