"""One log line per job attempt that did not succeed, and the app's error hooks.

Operators must see failures without turning on DEBUG: an error that will be retried is a
WARNING, a death an ERROR, a business ``Fail`` (or a ``Retry`` the job asked for) an INFO
line. Each line carries the job id, name, attempt and reason, escaped by
``conveyor.core.text.printable`` so a job's message can never forge or split log lines; the JSON
log format gets the same facts as fields.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from conveyor.core.job import Ack, LeasedJob, Outcome
from conveyor.core.text import printable
from conveyor.errors import Fail, Retry
from conveyor.hooks import ErrorReport, call_error_handlers

if TYPE_CHECKING:
    from conveyor.app import Conveyor

__all__ = ["report_outcome"]

log = logging.getLogger("conveyor.worker")

_LEVELS = {Outcome.RETRY: logging.WARNING, Outcome.DEAD: logging.ERROR,
           Outcome.FAILED: logging.INFO, Outcome.SNOOZE: logging.INFO}


def report_outcome(
    app: Conveyor, job: LeasedJob, exc: BaseException, ack: Ack,
    args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
) -> None:
    """Log the attempt ``ack`` ends, then call the app's error hooks if it was an error."""
    level = _LEVELS.get(ack.outcome)
    if level is None:  # succeeded, cancelled, interrupted: not a failure
        return
    # A job that asked for a retry (``raise Retry``) is rescheduled on purpose: no error.
    requested = ((isinstance(exc, Retry) and ack.outcome is Outcome.RETRY)
                 or ack.outcome is Outcome.SNOOZE)
    if requested:
        level = logging.INFO
    reason = (ack.message or "") if isinstance(exc, Fail) else f"{type(exc).__name__}: {exc}"
    verb = {Outcome.RETRY: f"error, retrying in {ack.retry_in or 0:.1f}s",
            Outcome.DEAD: "dead", Outcome.FAILED: "failed",
            Outcome.SNOOZE: f"snoozed for {ack.retry_in or 0:.1f}s"}[ack.outcome]
    log.log(level, "job %s %s attempt %d %s: %s", printable(job.id), printable(job.name),
            job.attempt, verb, printable(reason),
            extra={"job_id": job.id, "job_name": job.name, "attempt": job.attempt,
                   "outcome": ack.outcome.value, "reason": reason})
    if isinstance(exc, Fail) or requested or not app.error_handlers:
        return
    call_error_handlers(app.error_handlers, ErrorReport(
        job_id=job.id, name=job.name, queue=job.queue, attempt=job.attempt, exception=exc,
        will_retry=ack.outcome is Outcome.RETRY, retry_in=ack.retry_in,
        args=tuple(args), kwargs=dict(kwargs or {}), batch_id=job.batch_id))
