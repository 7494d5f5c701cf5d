"""Error hooks: the seam where Sentry, Rollbar or a pager learn that a job went wrong.

``app.on_error(fn)`` registers ``fn(report: ErrorReport)``. The worker calls every hook once
per attempt that ends in an error (any exception but ``Fail`` and ``Retry``, a timeout
included), and once when a job goes ``dead`` for any reason (its last retry, an unknown name,
a payload it cannot decode). A business ``Fail`` and a ``Retry`` the job asked for are
outcomes, not errors: they are logged, never reported.

The shape follows Sidekiq's ``error_handlers`` (exception + job context) and Celery's
``task_failure`` signal (task id, args, exception); unlike a middleware, a hook cannot change
the outcome, so a broken hook can never break the worker: what it raises is logged and
dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ErrorHandler", "ErrorReport", "call_error_handlers"]

log = logging.getLogger("conveyor.worker")


@dataclass(frozen=True, slots=True)
class ErrorReport:
    """One job attempt that went wrong, as error hooks receive it."""

    job_id: str
    name: str
    queue: str
    #: The attempt that ended (1 for the first run).
    attempt: int
    #: The exception the job raised (``JobTimeout`` for a timeout, ``UnknownJobError`` or
    #: ``PayloadError`` for a job that could not start).
    exception: BaseException
    #: True when the job will run again after its backoff; False when it ends ``dead``.
    will_retry: bool
    #: Seconds until the next attempt when ``will_retry``, else None.
    retry_in: float | None = None
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    batch_id: str | None = None


ErrorHandler = Callable[[ErrorReport], object]
"""A hook: called with the report; its return value is ignored."""


def call_error_handlers(handlers: Sequence[ErrorHandler], report: ErrorReport) -> None:
    """Call each hook in turn; an exception in one is logged and the next still runs."""
    for handler in handlers:
        try:
            handler(report)
        except Exception:
            log.exception("error hook %s failed on job %s; the job's outcome stands",
                          getattr(handler, "__qualname__", handler), report.job_id)
