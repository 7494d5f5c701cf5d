"""Transactional enqueue: a job enqueued in the application's own PostgreSQL transaction exists
if and only if that transaction commits (issue #18), with psycopg, SQLAlchemy and Django."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from conveyor import Conveyor, JobState
from conveyor.client.registry import JobFunction
from conveyor.errors import StorageError, TransactionUnsupported
from conveyor.storage.postgres.connection import parse_postgres_url
from conveyor.testing import drain

REPO = Path(__file__).resolve().parents[2]


class Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


@pytest.fixture
def url(postgres_server: Any) -> str:
    """A schema of this test's own."""
    return f"{postgres_server.url}?schema=t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def app(url: str) -> Iterator[Conveyor]:
    """An app on PostgreSQL (its schema migrated at the first use)."""
    conveyor = Conveyor(url)
    conveyor.storage  # noqa: B018 - opened (and migrated) before the test's own transaction
    try:
        yield conveyor
    finally:
        conveyor.close()


@pytest.fixture
def receipt(app: Conveyor) -> JobFunction:
    """The job a transaction enqueues; returns its argument."""
    @app.job(name="send_receipt")
    def send_receipt(order_id: int) -> int:
        return order_id

    return send_receipt


@pytest.fixture
def conn(postgres_server: Any) -> Iterator[psycopg.Connection[Any]]:
    """The application's own connection, with an ``orders`` table of its own."""
    with psycopg.connect(parse_postgres_url(postgres_server.url).conninfo) as db:
        db.execute("CREATE TABLE IF NOT EXISTS public.orders (id serial PRIMARY KEY, total int)")
        db.commit()
        yield db


def _order(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("INSERT INTO public.orders (total) VALUES (42) RETURNING id").fetchone()
    assert row is not None
    return int(row[0])


def _listen(url: str) -> psycopg.Connection[Any]:
    settings = parse_postgres_url(url)
    listener = psycopg.connect(settings.conninfo, autocommit=True)
    listener.execute(f'LISTEN "{settings.channel}"')
    return listener


def _notified(listener: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=0.5, stop_after=1)]


def test_a_committed_transaction_stores_the_job_and_wakes_a_worker_at_commit(
        app: Conveyor, receipt: JobFunction, conn: psycopg.Connection[Any]) -> None:
    listener = _listen(app.storage.url)
    with conn.transaction():
        order_id = _order(conn)
        ref = receipt.enqueue(order_id, connection=conn)
        assert ref is not None and ref.created
        assert app.get_job(ref.id) is None  # not visible outside the transaction yet
        assert _notified(listener) == []  # the NOTIFY waits for the commit
    assert _notified(listener) == ["default"]
    record = app.get_job(ref.id)
    assert record is not None and record.state == JobState.PENDING
    assert record.args == [order_id] and record.kwargs == {}
    assert drain(app) == 1
    assert ref.result(timeout=5) == order_id
    listener.close()


def test_a_rolled_back_transaction_leaves_no_job_no_batch_member_no_unique_lock(
        app: Conveyor, receipt: JobFunction, conn: psycopg.Connection[Any]) -> None:
    listener = _listen(app.storage.url)
    once = receipt.options(unique_key="order-1", unique_for=3600)
    with app.batch(description="open") as open_batch:
        with pytest.raises(Rollback), conn.transaction(), app.transaction(conn):
            order_id = _order(conn)
            unique = once.enqueue(1)
            member = receipt.enqueue(2)
            raise Rollback
        assert open_batch.enqueue_count == 2
    assert unique is not None and member is not None
    assert app.get_job(unique.id) is None and app.get_job(member.id) is None
    assert app.storage.count_jobs() == 0
    assert app.batch_status(open_batch.id)["total"] == 0
    assert _notified(listener) == []
    again = once.enqueue(3)  # the unique key is free: its lock went with the transaction
    assert again is not None and again.created
    assert conn.execute("SELECT count(*) FROM public.orders WHERE id = %s",
                        (order_id,)).fetchone() == (0,)
    listener.close()


def test_an_exception_inside_the_block_rolls_the_job_back_and_the_connection_stays_usable(
        app: Conveyor, receipt: JobFunction, conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(ZeroDivisionError), conn.transaction():
        ref = receipt.enqueue(_order(conn), connection=conn)
        assert ref is not None
        _ = 1 / 0
    assert app.get_job(ref.id) is None
    with conn.transaction():
        kept = receipt.enqueue(_order(conn), connection=conn)
    assert kept is not None and app.get_job(kept.id) is not None


def test_the_applications_search_path_and_row_factory_are_left_as_they_were(
        app: Conveyor, receipt: JobFunction, conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS public.jobs (mine text)")
    conn.execute("SET search_path TO public")
    conn.commit()
    conn.row_factory = dict_row  # type: ignore[assignment]
    with conn.transaction():
        conn.execute("INSERT INTO jobs (mine) VALUES ('yes')")  # the application's own table
        ref = receipt.enqueue(7, connection=conn)
        assert conn.execute("SHOW search_path").fetchone() == {"search_path": "public"}
        assert conn.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 1}
    assert ref is not None and app.get_job(ref.id) is not None
    conn.execute("DROP TABLE public.jobs")
    conn.commit()


def test_enqueue_many_app_enqueue_and_a_batch_block_join_the_transaction(
        app: Conveyor, receipt: JobFunction, conn: psycopg.Connection[Any]) -> None:
    for commit in (False, True):
        with pytest.raises(Rollback) if not commit else nullcontext(), conn.transaction():
            refs = receipt.enqueue_many([(i,) for i in range(3)], connection=conn)
            named = app.enqueue("send_receipt", [9], connection=conn)
            with app.transaction(conn), app.batch(description="in tx") as batch:
                receipt.enqueue(10)
                receipt.enqueue_in(60, 11)
            if not commit:
                raise Rollback
        ids = [r.id for r in refs] + [named.id if named else ""]
        found = [app.get_job(i) for i in ids]
        status = app.storage.get_batch(batch.id)
        if commit:
            assert all(r is not None for r in found)
            assert status is not None and status.total == 2 and status.closed
        else:
            assert found == [None] * 4 and status is None


def test_an_autocommit_connection_outside_a_transaction_stores_at_once(
        app: Conveyor, receipt: JobFunction, postgres_server: Any) -> None:
    with psycopg.connect(parse_postgres_url(postgres_server.url).conninfo,
                         autocommit=True) as auto:
        ref = receipt.enqueue(1, connection=auto)
        assert ref is not None and app.get_job(ref.id) is not None
        assert auto.execute("SHOW search_path").fetchone() == ('"$user", public',)


def test_a_failed_transaction_is_refused_with_one_line(
        app: Conveyor, receipt: JobFunction, conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1/0")
    with pytest.raises(StorageError, match="roll it back"):
        receipt.enqueue(1, connection=conn)
    conn.rollback()


def test_a_connection_to_another_database_or_an_unmigrated_schema_is_refused(
        app: Conveyor, receipt: JobFunction, postgres_server: Any) -> None:
    conninfo = parse_postgres_url(postgres_server.url).conninfo
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS elsewhere")
        admin.execute("CREATE DATABASE elsewhere")
    other = conninfo.replace("/postgres?", "/elsewhere?")
    with psycopg.connect(other) as conn:
        with pytest.raises(TransactionUnsupported, match="not in database 'elsewhere'"):
            receipt.enqueue(1, connection=conn)
        conn.rollback()
        conn.execute(f'CREATE SCHEMA "{parse_postgres_url(app.storage.url).schema}"')
        conn.execute(f'CREATE TABLE "{parse_postgres_url(app.storage.url).schema}".jobs (x int)')
        conn.commit()
        with pytest.raises(TransactionUnsupported, match="another server or database"):
            receipt.enqueue(1, connection=conn)
    assert app.storage.count_jobs() == 0


def test_what_is_not_a_connection_is_refused_and_json_values_stay_arguments(
        app: Conveyor, receipt: JobFunction, tmp_path: Path) -> None:
    @app.job(name="named")
    def named(connection: str) -> str:
        return connection

    ref = named.enqueue(connection="replica")  # a JSON value: the job's own argument
    assert ref is not None
    record = app.get_job(ref.id)
    assert record is not None and record.kwargs == {"connection": "replica"}
    with pytest.raises(TransactionUnsupported, match=r"builtins\.object"):
        receipt.enqueue(1, connection=object())
    other = Conveyor(f"sqlite:///{tmp_path}/jobs.db")
    job = other.job(name="x")(lambda: None)
    with pytest.raises(TransactionUnsupported, match="a sqlite:// storage cannot enqueue"):
        job.enqueue(connection=object())
    other.close()


def _engine_url(postgres_server: Any) -> str:
    return postgres_server.url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.mark.parametrize("commit", [True, False])
def test_a_sqlalchemy_session_and_connection_carry_the_transaction(
        app: Conveyor, receipt: JobFunction, postgres_server: Any, commit: bool) -> None:
    engine = create_engine(_engine_url(postgres_server))
    refs = []
    outcome = nullcontext if commit else partial(pytest.raises, Rollback)
    with outcome(), Session(engine) as session, session.begin():
        session.execute(text("INSERT INTO public.orders (total) VALUES (1)"))
        refs.append(receipt.enqueue(1, connection=session))
        if not commit:
            raise Rollback
    with outcome(), engine.begin() as connection:
        connection.execute(text("INSERT INTO public.orders (total) VALUES (2)"))
        refs.append(receipt.enqueue(2, connection=connection))
        if not commit:
            raise Rollback
    engine.dispose()
    found = [app.get_job(r.id) if r else None for r in refs]
    assert all(f is not None for f in found) if commit else found == [None, None]


_DJANGO = """
import json, sys
import django
from django.conf import settings
host, port, url = sys.argv[1:4]
settings.configure(DATABASES={"default": {
    "ENGINE": "django.db.backends.postgresql", "NAME": "postgres", "USER": "postgres",
    "HOST": host, "PORT": port}}, INSTALLED_APPS=[], USE_TZ=True)
django.setup()
from django.db import connection, transaction
from conveyor import Conveyor
app = Conveyor(url)
job = app.job(name="send_receipt")(lambda order_id: order_id)
with transaction.atomic():
    kept = job.enqueue(1, connection=connection)
ids = {"kept": kept.id}
try:
    with transaction.atomic():
        dropped = job.enqueue(2, connection=connection)
        ids["dropped"] = dropped.id
        raise RuntimeError("roll back")
except RuntimeError:
    pass
with transaction.atomic():
    with transaction.atomic():  # a savepoint that rolls back takes its job with it
        try:
            with transaction.atomic():
                inner = job.enqueue(3, connection=connection)
                ids["inner"] = inner.id
                raise RuntimeError("roll back the savepoint")
        except RuntimeError:
            pass
    outer = job.enqueue(4, connection=connection)
    ids["outer"] = outer.id
app.close()
print(json.dumps(ids))
"""


def test_a_django_atomic_block_carries_the_transaction(
        app: Conveyor, postgres_server: Any) -> None:
    """Django is configured once per process (the contrib tests use SQLite): a subprocess."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _DJANGO, "127.0.0.1", str(postgres_server.port),
         app.storage.url], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    ids = json.loads(done.stdout.strip().splitlines()[-1])
    assert app.get_job(ids["kept"]) is not None
    assert app.get_job(ids["outer"]) is not None
    assert app.get_job(ids["dropped"]) is None
    assert app.get_job(ids["inner"]) is None


def test_with_a_broker_only_a_committed_job_is_ever_published(
        url: str, conn: psycopg.Connection[Any]) -> None:
    """The store is the broker's outbox: a relay publishing while the application's
    transaction is open sees nothing of it; a rolled-back job is never published, a committed
    one is, once."""
    from conveyor.broker import open_broker
    from conveyor.worker.config import WorkerConfig
    from conveyor.worker.relay import Relay

    app = Conveyor(url, broker=f"memory://{uuid.uuid4().hex}")
    try:
        @app.job(name="send_receipt")
        def send_receipt(order_id: int) -> int:
            return order_id

        relay = Relay(app.storage, app.clock, WorkerConfig(concurrency=1),
                      broker=open_broker(app.broker_url or ""))
        with pytest.raises(Rollback), conn.transaction():
            dropped = send_receipt.enqueue(_order(conn), connection=conn)
            relay.tick()
            raise Rollback
        with conn.transaction():
            kept = send_receipt.enqueue(_order(conn), connection=conn)
            relay.tick()
            assert relay.published == 0  # not committed yet: no relay can see it
        relay.tick()
        assert relay.published == 1
        taken = relay.broker.consume([("default", 0)], 10, 1.0)
        assert [d.job_id for d in taken] == [kept.id]
        assert dropped is not None and app.get_job(dropped.id) is None
        relay.stop(5)
    finally:
        app.close()
