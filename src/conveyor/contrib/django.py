"""Enqueue jobs only once a Django ``atomic`` block commits.

A job enqueued inside ``transaction.atomic()`` may start before the block commits (and not
see its rows), or run for rows that a rollback then removes. Defer the enqueue instead::

    from django.db import transaction
    from conveyor.contrib.django import enqueue_on_commit

    with transaction.atomic():
        user = User.objects.create(email="ada@example.com")
        enqueue_on_commit(send_welcome, user.pk)
    # committed: send_welcome(user.pk) is enqueued now; rolled back: it never is

This is Django's own ``transaction.on_commit`` (see its documentation for the rules: the
outermost ``atomic`` block decides, a rolled-back savepoint drops what was deferred in it,
outside any block the job is enqueued at once). For another database alias, or to log and
go on when storing a job fails, call it directly with ``enqueue_call``::

    transaction.on_commit(enqueue_call(send_welcome, user.pk), using="billing", robust=True)

``functools.partial(send_welcome.enqueue, user.pk)`` works too, except with ``robust=True``:
Django's error log reads the callable's ``__qualname__``, which a partial lacks (Django 5.2),
so a failing enqueue would raise ``AttributeError`` instead of being logged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from conveyor.client.refs import JobRef
from conveyor.client.registry import JobFunction

__all__ = ["enqueue_call", "enqueue_on_commit"]


def enqueue_on_commit(job: JobFunction, /, *args: Any, **kwargs: Any) -> None:
    """``job.enqueue(*args, **kwargs)`` once the default database's transaction commits;
    never if it rolls back. ``job`` may carry options: ``job.options(queue="low")``."""
    transaction.on_commit(enqueue_call(job, *args, **kwargs))


def enqueue_call(job: JobFunction, /, *args: Any, **kwargs: Any) -> Callable[[], JobRef | None]:
    """A function of no arguments that enqueues ``job(*args, **kwargs)``: what
    ``transaction.on_commit`` takes, named after the job for Django's logs."""
    def enqueue() -> JobRef | None:
        return job.enqueue(*args, **kwargs)

    enqueue.__qualname__ = enqueue.__name__ = f"enqueue[{job.name}]"
    return enqueue
