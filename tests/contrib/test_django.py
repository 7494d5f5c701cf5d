"""``conveyor.contrib.django`` and the ``transaction.on_commit`` recipe, on a real SQLite file.

Django is configured once per process (``settings.configure``); each test starts from an
empty table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial

import pytest
from django.db import connection, transaction

from conveyor import Conveyor
from conveyor.client.registry import JobFunction
from conveyor.contrib.django import enqueue_call, enqueue_on_commit
from tests.contrib.helpers import configure_django, stored


@pytest.fixture(scope="module", autouse=True)
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Django on a SQLite file, with the tables the tests write to."""
    configure_django(tmp_path_factory.mktemp("django"))
    yield
    connection.close()


@pytest.fixture(autouse=True)
def empty_table() -> None:
    """Each test starts without users."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM users")


def add_user(user_id: int) -> None:
    """Insert a row in the current transaction."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO users (id, email) VALUES (%s, %s)",
                       [user_id, f"user{user_id}@example.com"])


def user_ids() -> list[int]:
    """Committed rows."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM users ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def test_the_job_is_stored_when_the_atomic_block_commits(
    app: Conveyor, welcome: JobFunction
) -> None:
    with transaction.atomic():
        add_user(1)
        enqueue_on_commit(welcome, 1, greeting="hello")
        enqueue_on_commit(welcome.options(queue="low"), 2)
        assert stored(app) == []
    assert user_ids() == [1]
    assert stored(app) == [("default", [1], {"greeting": "hello"}), ("low", [2], {})]


def test_a_rollback_drops_the_job(app: Conveyor, welcome: JobFunction) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        add_user(1)
        enqueue_on_commit(welcome, 1)
        raise RuntimeError("payment declined")
    assert (user_ids(), stored(app)) == ([], [])


def test_a_rolled_back_inner_block_drops_only_its_own_jobs(
    app: Conveyor, welcome: JobFunction
) -> None:
    with transaction.atomic():
        enqueue_on_commit(welcome, 1)
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue_on_commit(welcome, 2)
            raise RuntimeError("rolled back to the savepoint")
        with transaction.atomic():
            enqueue_on_commit(welcome, 3)
        assert stored(app) == []
    assert [args for _, args, _ in stored(app)] == [[1], [3]]


def test_outside_an_atomic_block_the_job_is_stored_at_once(
    app: Conveyor, welcome: JobFunction
) -> None:
    enqueue_on_commit(welcome, 1)
    assert stored(app) == [("default", [1], {})]


def test_the_recipe_with_another_alias_and_robust(
    app: Conveyor, welcome: JobFunction, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="django.db.backends.base"), \
            transaction.atomic(using="default"):
        add_user(1)
        # robust=True: a job that cannot be stored is logged, and the next one still runs.
        transaction.on_commit(enqueue_call(welcome, object()), using="default", robust=True)
        transaction.on_commit(enqueue_call(welcome, 2), using="default", robust=True)
    assert user_ids() == [1]
    assert stored(app) == [("default", [2], {})]
    assert "Error calling enqueue[welcome] in on_commit()" in caplog.text
    assert "is not JSON" in caplog.text


def test_the_partial_recipe(app: Conveyor, welcome: JobFunction) -> None:
    with transaction.atomic():
        transaction.on_commit(partial(welcome.enqueue, 1, greeting="hello"))
        assert stored(app) == []
    assert stored(app) == [("default", [1], {"greeting": "hello"})]
