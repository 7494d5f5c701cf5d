"""Waiting calls share one LISTEN connection per process (``storage/postgres/notices.py``).

A web app awaiting many results (``await ref.aresult()``) or many batches (``Batch.wait``)
at once must not hold a PostgreSQL backend per wait: past ``max_connections`` nobody could
connect, the workers included. Each test counts the backends the waits add while they wait,
then checks every wait is still woken by what it waits for.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor
from conveyor.client.refs import JobRef
from conveyor.client.registry import JobFunction
from conveyor.storage.postgres import notices
from tests.api.helpers import echo_job, run_by_hand
from tests.support.waiting import wait_until

WAITS = 30


@pytest.fixture
def app(postgres_server: Any) -> Iterator[Conveyor]:
    conveyor = Conveyor(f"{postgres_server.url}?schema=w{uuid.uuid4().hex[:12]}")
    try:
        yield conveyor
    finally:
        conveyor.close()


@pytest.fixture
def job(app: Conveyor) -> JobFunction:
    return echo_job(app)


@pytest.fixture
def admin(postgres_server: Any) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        yield conn


def _backends(admin: psycopg.Connection[Any]) -> int:
    """conveyor's connections to the test database, whoever opened them."""
    row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                        "current_database() AND application_name LIKE 'conveyor%'").fetchone()
    assert row is not None
    return int(row[0])


def _batch(app: Conveyor, job: JobFunction) -> str:
    with app.batch() as batch:
        job.enqueue(1)
    return batch.id


def test_many_batch_waits_hold_one_connection(app: Conveyor, job: JobFunction,
                                              admin: psycopg.Connection[Any]) -> None:
    batch_ids = [_batch(app, job) for _ in range(WAITS)]
    before = _backends(admin)
    with ExitStack() as stack:
        waiters = [stack.enter_context(app.storage.batch_finished(b)) for b in batch_ids]
        assert _backends(admin) - before <= 1  # one per wait before: 30
        for _ in batch_ids:
            run_by_hand(app)
        # every wait is woken by its own batch (one not woken would sit out its 60 s)
        assert [w.wait(60) for w in waiters] == [True] * WAITS


@pytest.fixture
def limited(app: Conveyor, admin: psycopg.Connection[Any]) -> Iterator[Conveyor]:
    """The same schema as ``app``, through a role PostgreSQL lets open 4 connections."""
    schema = app.storage._db.settings.schema  # type: ignore[union-attr]
    role = f"lim{uuid.uuid4().hex[:10]}"
    admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 4")
    for grant in (f'USAGE ON SCHEMA "{schema}"',
                  f'SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}"',
                  f'USAGE ON ALL SEQUENCES IN SCHEMA "{schema}"',
                  f'EXECUTE ON ALL FUNCTIONS IN SCHEMA "{schema}"'):
        admin.execute(f"GRANT {grant} TO {role}")
    url = app.storage.url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)  # type: ignore[union-attr]
    conveyor = Conveyor(url)
    try:
        yield conveyor
    finally:
        conveyor.close()
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")


def test_many_result_awaits_through_a_role_limited_to_four_connections(
    app: Conveyor, job: JobFunction, limited: Conveyor, admin: psycopg.Connection[Any]
) -> None:
    ids = [job.enqueue(i).id for i in range(WAITS)]

    async def main() -> list[Any]:
        # A burst of first calls on the loop (a web app's first requests) opens one
        # connection for the loop, not one per call; then each waits on the shared one.
        waits = [asyncio.create_task(JobRef(job_id, True, limited.client).aresult(timeout=60))
                 for job_id in ids]
        await asyncio.to_thread(wait_until, lambda: _waiter_rows(app) == WAITS, 30,
                                what="every result wait to register")
        for _ in ids:
            await asyncio.to_thread(run_by_hand, app)
        return await asyncio.gather(*waits)

    assert asyncio.run(main()) == [None] * WAITS  # run_by_hand acks without a result
    assert _waiter_rows(app) == 0  # each wait took its row away


def test_a_burst_of_first_async_reads_opens_one_connection(
    job: JobFunction, limited: Conveyor
) -> None:
    ids = [job.enqueue(i).id for i in range(WAITS)]

    async def main() -> list[Any]:
        return await asyncio.gather(*(limited.aget_job(job_id) for job_id in ids))

    assert [record.id for record in asyncio.run(main())] == ids


def _waiter_rows(app: Conveyor) -> int:
    with app.storage._db.write() as cur:  # type: ignore[union-attr]
        row = cur.execute("SELECT count(*) FROM result_waiters").fetchone()
    assert row is not None
    return int(row[0])


def test_a_terminated_listening_connection_wakes_every_wait_and_listens_again(
    app: Conveyor, job: JobFunction, admin: psycopg.Connection[Any]
) -> None:
    first, second = _batch(app, job), _batch(app, job)
    with app.storage.batch_finished(first) as one, app.storage.batch_finished(second) as two:
        assert one.wait(0.05) is False
        killed = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                               "application_name = 'conveyor-waits'").fetchall()
        assert killed and all(done for (done,) in killed)
        # Woken though nothing finished: a notification may have gone with the connection,
        # so each caller reads again, after its wait listens on a new one.
        assert one.wait(60) is True
        assert two.wait(60) is True
        run_by_hand(app)
        run_by_hand(app)
        assert one.wait(60) is True
        assert two.wait(60) is True
    assert app.wait_batch(first, timeout=60)["complete"] is True


def test_the_connection_closes_when_nobody_waits(app: Conveyor, job: JobFunction,
                                                 admin: psycopg.Connection[Any],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notices, "IDLE", 0.5)
    batch_id = _batch(app, job)

    hub = app.storage._notices  # type: ignore[union-attr]

    def alive(pid: int) -> bool:
        return admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                             (pid,)).fetchone() is not None

    with app.storage.batch_finished(batch_id) as waiter:
        pid = hub._conn.info.backend_pid
        assert alive(pid)
        assert waiter.wait(0.6) is False  # longer than IDLE: a wait keeps it open
        assert alive(pid) and hub._conn.info.backend_pid == pid
    wait_until(lambda: not alive(pid), 30, what="the idle connection to close")
    done = threading.Thread(target=run_by_hand, args=(app,))
    with app.storage.batch_finished(batch_id) as waiter:  # opened again
        done.start()
        assert waiter.wait(60) is True
    done.join()
