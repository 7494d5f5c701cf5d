"""``conveyor.contrib.sqlalchemy``: jobs enqueued when a real SQLite transaction commits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session

from conveyor import Conveyor
from conveyor.client.registry import JobFunction
from conveyor.contrib.sqlalchemy import enqueue_on_commit, on_commit
from conveyor.errors import PayloadError
from conveyor.testing import drain
from tests.contrib.helpers import Base, User, stored


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """The application's own SQLite database (not the job storage's)."""
    engine = create_engine(f"sqlite:///{tmp_path}/app.db")
    Base.metadata.create_all(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def emails(engine: Engine) -> list[str]:
    """Committed users, as another connection sees them."""
    with Session(engine) as session:
        return list(session.scalars(select(User.email).order_by(User.id)))


def test_the_job_is_stored_when_the_transaction_commits(
    app: Conveyor, engine: Engine, welcome: JobFunction
) -> None:
    with Session(engine) as session, session.begin():
        session.add(User(id=1, email="ada@example.com"))
        enqueue_on_commit(session, welcome, 1, greeting="hello")
        enqueue_on_commit(session, welcome.options(queue="low"), 2)
        session.flush()
        assert stored(app) == []  # flushed is not committed
    assert stored(app) == [("default", [1], {"greeting": "hello"}), ("low", [2], {})]


def test_a_rollback_drops_the_job(app: Conveyor, engine: Engine, welcome: JobFunction) -> None:
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        session.add(User(id=1, email="ada@example.com"))
        enqueue_on_commit(session, welcome, 1)
        raise RuntimeError("payment declined")
    assert (emails(engine), stored(app)) == ([], [])


def test_a_dropped_job_stays_dropped_at_the_next_commit(
    app: Conveyor, engine: Engine, welcome: JobFunction
) -> None:
    with Session(engine) as session:
        session.add(User(id=1, email="ada@example.com"))
        enqueue_on_commit(session, welcome, 1)
        session.rollback()
        session.add(User(id=2, email="bob@example.com"))
        enqueue_on_commit(session, welcome, 2)
        session.commit()
    assert emails(engine) == ["bob@example.com"]
    assert stored(app) == [("default", [2], {})]


def test_savepoints_keep_or_drop_what_was_deferred_inside_them(
    app: Conveyor, engine: Engine, welcome: JobFunction
) -> None:
    with Session(engine) as session, session.begin():
        enqueue_on_commit(session, welcome, 1)
        with pytest.raises(RuntimeError), session.begin_nested():
            enqueue_on_commit(session, welcome, 2)
            raise RuntimeError("this one is rolled back to its savepoint")
        with session.begin_nested():
            enqueue_on_commit(session, welcome, 3)
        assert stored(app) == []  # a released savepoint is not a commit
    assert [args for _, args, _ in stored(app)] == [[1], [3]]


def test_a_released_savepoint_is_dropped_with_its_enclosing_transaction(
    app: Conveyor, engine: Engine, welcome: JobFunction
) -> None:
    with Session(engine) as session:
        with session.begin_nested():
            enqueue_on_commit(session, welcome, 1)
        session.rollback()
        session.commit()
    assert stored(app) == []


def test_deferred_before_a_transaction_began_waits_for_the_next(
    app: Conveyor, engine: Engine, welcome: JobFunction
) -> None:
    with Session(engine) as session:
        assert session.get_transaction() is None
        enqueue_on_commit(session, welcome, 1)
        session.add(User(id=1, email="ada@example.com"))
        assert stored(app) == []
        session.commit()
        assert stored(app) == [("default", [1], {})]
        session.commit()  # an empty transaction does not enqueue it again
    assert len(stored(app)) == 1


def test_the_job_sees_the_committed_rows(
    app: Conveyor, engine: Engine
) -> None:
    @app.job(name="send_welcome")
    def send_welcome(user_id: int) -> str:
        with Session(engine) as session:
            user = session.get(User, user_id)
            assert user is not None, "the job ran before the row was committed"
            return user.email

    with Session(engine) as session, session.begin():
        session.add(User(id=7, email="ada@example.com"))
        enqueue_on_commit(session, send_welcome, 7)
    [job] = app.storage.list_jobs(limit=1)
    assert drain(app) == 1
    record = app.get_job(job.id)
    assert record is not None and record.result == '"ada@example.com"'


def test_on_commit_takes_any_call(app: Conveyor, engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        on_commit(session, lambda: app.enqueue("billing.charge", [42], queue="billing"))
    assert stored(app) == [("billing", [42], {})]


def test_a_job_that_cannot_be_stored_is_raised_after_the_commit(
    app: Conveyor, engine: Engine, welcome: JobFunction
) -> None:
    with pytest.raises(PayloadError), Session(engine) as session, session.begin():
        session.add(User(id=1, email="ada@example.com"))
        enqueue_on_commit(session, welcome, object())  # not JSON: refused when stored
        enqueue_on_commit(session, welcome, 2)
    # The rows are committed and the other job is stored: the caller hears of the one lost.
    assert emails(engine) == ["ada@example.com"]
    assert stored(app) == [("default", [2], {})]
