"""Enqueue jobs only once a SQLAlchemy session's transaction commits.

A job enqueued inside a transaction may start before the transaction commits (and not see
its rows), or run for rows that a rollback then removes. Defer the enqueue instead::

    from conveyor.contrib.sqlalchemy import enqueue_on_commit

    with Session(engine) as session, session.begin():
        session.add(User(id=42, email="ada@example.com"))
        enqueue_on_commit(session, send_welcome, 42)
    # committed: send_welcome(42) is enqueued now; rolled back: it never is

Rules, the same as Django's ``transaction.on_commit``:

* The job is enqueued after the outermost transaction commits, in the order deferred.
* A rollback drops it; so does a savepoint (``session.begin_nested()``) that rolls back, when
  the job was deferred inside it. A savepoint that is released hands its jobs to the
  enclosing transaction.
* Deferred before the session has begun a transaction, it waits for the next one.
* The commit has happened when the jobs are stored: if storing one fails (storage down), the
  error is raised from ``commit()`` after the others were tried, and that job is not stored.

For an ``AsyncSession`` pass its ``sync_session``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

from conveyor.client.registry import JobFunction

__all__ = ["enqueue_on_commit", "on_commit"]

_INFO_KEY = "conveyor.on_commit"

Call = Callable[[], object]


@dataclass(slots=True)
class _Deferred:
    """A session's deferred calls, by the transaction they wait for (None: not begun yet)."""

    calls: dict[SessionTransaction | None, list[Call]] = field(default_factory=dict)
    committed: set[SessionTransaction] = field(default_factory=set)


def enqueue_on_commit(session: Session, job: JobFunction, /, *args: Any, **kwargs: Any) -> None:
    """``job.enqueue(*args, **kwargs)`` once the session's transaction commits; never if it
    rolls back. ``job`` may carry options: ``enqueue_on_commit(s, job.options(queue="low"), 1)``.
    """
    on_commit(session, partial(job.enqueue, *args, **kwargs))


def on_commit(session: Session, call: Call) -> None:
    """Call ``call()`` once the session's transaction commits; never if it rolls back.

    For anything ``enqueue_on_commit`` does not cover, e.g.
    ``on_commit(session, lambda: app.enqueue("billing.charge", [order_id]))``.
    """
    deferred = _deferred(session)
    deferred.calls.setdefault(_innermost(session), []).append(call)


def _innermost(session: Session) -> SessionTransaction | None:
    return session.get_nested_transaction() or session.get_transaction()


def _deferred(session: Session) -> _Deferred:
    """The session's deferred calls, listening to its transactions from the first call on."""
    deferred = session.info.get(_INFO_KEY)
    if isinstance(deferred, _Deferred):
        return deferred
    deferred = session.info[_INFO_KEY] = _Deferred()
    event.listen(session, "after_transaction_create", partial(_created, deferred))
    event.listen(session, "after_commit", partial(_committed, deferred))
    event.listen(session, "after_transaction_end", partial(_ended, deferred))
    return deferred


def _created(deferred: _Deferred, session: Session, transaction: SessionTransaction) -> None:
    """A new outermost transaction takes the calls deferred before any had begun."""
    if transaction.parent is None and None in deferred.calls:
        deferred.calls[transaction] = deferred.calls.pop(None)


def _committed(deferred: _Deferred, session: Session) -> None:
    # after_commit names no transaction: the one committing is still the session's innermost
    # (it is closed right after this event), for a savepoint as for the outermost.
    transaction = _innermost(session)
    if transaction is not None:
        deferred.committed.add(transaction)


def _ended(deferred: _Deferred, session: Session, transaction: SessionTransaction) -> None:
    """Run, hand up or drop the calls of a transaction that just ended.

    Ended without ``after_commit`` means rolled back (or closed unfinished): its calls go.
    """
    calls = deferred.calls.pop(transaction, [])
    if transaction not in deferred.committed:
        return
    deferred.committed.discard(transaction)
    if transaction.parent is not None:  # a released savepoint: wait for the enclosing one
        deferred.calls.setdefault(transaction.parent, []).extend(calls)
        return
    _run_all(calls)


def _run_all(calls: list[Call]) -> None:
    """Call each in order; one that raises does not stop the rest, and the first error is
    raised at the end, so the caller of ``commit()`` hears of it."""
    error: BaseException | None = None
    for call in calls:
        try:
            call()
        except Exception as exc:
            error = error or exc
    if error is not None:
        raise error
