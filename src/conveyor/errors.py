"""Exceptions conveyor raises, and the ones job code raises to steer the outcome."""

from __future__ import annotations

import math


class ConveyorError(Exception):
    """Base class of every error conveyor raises itself."""


class Fail(Exception):
    """Raised by job code for a business failure: the job ends ``failed``, is never retried.

    The message is kept as the job's reason and shown in batch summaries.
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class Retry(Exception):
    """Raised by job code to ask for a retry after ``in_seconds`` (counts as an attempt).

    ``in_seconds`` is a finite number of seconds, at least 0 (None: the default backoff);
    anything else raises ``ValueError`` where the ``Retry`` is made: a NaN used to become
    0 s, an immediate retry again and again until the retries were used up."""

    def __init__(self, message: str = "", in_seconds: float | None = None) -> None:
        super().__init__(message)
        if in_seconds is not None and not _seconds(in_seconds):
            raise ValueError(f"in_seconds must be a finite number of seconds >= 0, not "
                             f"{in_seconds!r:.40}")
        self.message = message
        self.in_seconds = in_seconds


class RetryAfter(Exception):
    """Raised by job code to run again after ``seconds`` WITHOUT spending an attempt: the
    job is stored ``scheduled``, its retry budget (``errors``) untouched, with a ``snoozed``
    event saying why (``message``) and for how long (Oban's ``{:snooze, seconds}``, Sidekiq
    Enterprise's reschedule on ``OverLimit``). For a throttling downstream service:
    ``conveyor.raise_for_retry_after(response)`` makes one from a 429/503 ``Retry-After``.

    ``seconds`` is a finite number at least 0; anything else raises ``ValueError`` here. A
    job that snoozes for ever waits for ever: bound it with ``expires_in`` (its deadline)."""

    def __init__(self, seconds: float, message: str = "") -> None:
        super().__init__(message or f"retry after {seconds!r:.40}s")
        if not _seconds(seconds):
            raise ValueError(f"seconds must be a finite number of seconds >= 0, not "
                             f"{seconds!r:.40}")
        self.seconds = float(seconds)
        self.message = message


def _seconds(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


class PayloadError(ConveyorError, ValueError):
    """Arguments cannot be stored: not JSON (with the path of the bad value) or too large."""


class InvalidNameError(ConveyorError, ValueError):
    """A job or queue name conveyor will not store: empty, too long, or holding a character
    that cannot be stored or printed safely (control characters, line breaks, lone
    surrogates), since names end up in keys, listings and log lines."""


class InvalidKeyError(ConveyorError, ValueError):
    """A flow-control key (unique, concurrency, rate, order, debounce/throttle, aggregation)
    that breaks the key rule: 1 to 512 bytes of UTF-8, no control characters, line breaks or
    lone surrogates (docs/flow-control.md, "Keys"). Raised at enqueue, before anything is
    stored, the same on every backend."""


class UnknownJobError(ConveyorError, LookupError):
    """No job is registered under that name."""


class NotAJob(UnknownJobError):
    """A stored name that is not a job of this app and never will be (a Django backend's
    stored module path that is not one of the project's tasks): looked at, never imported.
    A worker ends such a job ``dead`` at once with this reason, whatever its retries."""


class JobNotFound(ConveyorError, LookupError):
    """No job with that id is stored (never existed, or trimmed by retention)."""


class ScheduleNotFound(ConveyorError, LookupError):
    """No periodic schedule with that name is stored."""


class ScheduleExists(ConveyorError, ValueError):
    """A periodic schedule of that name is stored already (adding one at run time)."""


class BatchNotFound(ConveyorError, LookupError):
    """No batch with that id is stored."""


class BatchClosedError(ConveyorError):
    """Jobs were added to a batch that has already finished."""


class WorkflowError(ConveyorError, ValueError):
    """A workflow that cannot be built or enqueued as given (an unknown parent, a policy
    that does not exist, a node a client middleware stopped)."""


class NoAggregatorError(ConveyorError, LookupError):
    """An aggregated job enqueued where no aggregator is registered for it: its aggregation would
    never run, so it is refused (``@app.aggregate(job)``, docs/aggregation.md)."""


class LeaseLost(ConveyorError):
    """A running job acted on its lease after losing it (its run was reclaimed after a
    missed heartbeat, or cancelled): nothing was written; its outcome will be refused too."""


class StorageURLError(ConveyorError, ValueError):
    """A storage URL that conveyor cannot open (unknown scheme, missing part)."""


class BrokerURLError(ConveyorError, ValueError):
    """A broker URL that conveyor cannot open (unknown scheme, missing part)."""


class BrokerUnavailable(ConveyorError, ConnectionError):
    """The broker could not be reached or refused this client (host down, wrong credentials,
    no permission on the virtual host): one line saying which, never a password."""


class BrokerUnsupported(ConveyorError):
    """A broker was asked for with a storage that cannot be a broker's outbox (yet)."""


class StorageError(ConveyorError):
    """The storage answered an operation with an error of its own (a command or script it
    refused), named in the message; whichever backend it is, callers see only this."""


class StorageUnavailable(StorageError):
    """The storage could not be reached or used (server down, file locked or not writable,
    not a database): an outage, which every backend reports as this one error."""


class StorageMissing(StorageUnavailable):
    """A store opened only to read does not exist (no database file, no schema): nothing was
    created. Commands that only read never create a store; ``conveyor migrate`` does."""


class StorageReadOnly(StorageError):
    """The storage answers, but this client may only read (a read-only role or transaction,
    no write privilege): listings work, a worker cannot take a single job."""


class TransactionUnsupported(ConveyorError, TypeError):
    """An enqueue was asked to join the caller's own database transaction (``connection=``,
    ``app.transaction(...)``) on a storage that cannot: not the database that connection
    talks to, or not a connection conveyor can write through."""


class BlobUnavailable(ConveyorError):
    """A blob store (docs/job-data.md) could not be reached or refused a call: the enqueue
    fails, a job that needed its data is retried."""


class BlobMissing(ConveyorError, LookupError):
    """Data a job references is not in its blob store (deleted by hand, a store that lost
    it): the job ends dead with this one line."""


class UnsealError(ConveyorError):
    """Data sealed with a key this process does not hold, or that the key does not open
    (a wrong key, a ciphertext moved or damaged): one line naming the key id
    (``conveyor.core.encryption``)."""


class TypedDataError(TypeError):
    """A value that does not validate against its typed annotation: one line naming the
    parameter and the field (``conveyor.core.typed``)."""


class JobTimeout(ConveyorError):
    """A job ran past its ``timeout``; recorded as an error and retried like any other."""


class JobFailed(ConveyorError):
    """Raised by ``JobRef.result()`` when the job ended failed, dead or cancelled.

    Where the job's own exception can be rebuilt (``conveyor.core.reraise``), the exception
    raised derives from both its class and this one; either way it carries ``job_id``,
    ``state``, ``message``, and for a job an error ended, ``error_type`` (its class path)
    and ``job_traceback`` (the traceback as the worker saw it).
    """

    def __init__(self, job_id: str, state: str, message: str | None, *,
                 error_type: str | None = None, job_traceback: str | None = None) -> None:
        super().__init__(f"job {job_id} ended {state}: {message or 'no message'}")
        self.job_id = job_id
        self.state = state
        self.message = message
        self.error_type = error_type
        self.job_traceback = job_traceback


class ResultTimeout(ConveyorError, TimeoutError):
    """``JobRef.result(timeout=...)`` gave up waiting."""


class Suspend(BaseException):
    """A durable job leaves its worker until ``until`` (the storage's clock): a sleep, a
    wait, a step's retry (docs/durable.md). Raised by the durable calls, never an error:
    a ``BaseException``, so ``except Exception`` in job code lets it through; the worker
    acknowledges the attempt ``SUSPENDED``."""

    def __init__(self, until: float, reason: str) -> None:
        super().__init__(reason)
        self.until = until
        self.reason = reason


class Handback(BaseException):
    """A resumable loop (``ctx.iterate``) stopped between items at its checkpoint: the
    worker is stopping (the job goes back to pending, not an error attempt) or the job was
    cancelled (it ends ``cancelled``)."""


class StepFailed(Fail):
    """A step failed past its own retries. Its error is recorded, so every replay raises it
    again without running the step: the job ends ``failed`` (job code may catch it and
    compensate, the same way on every replay)."""

    def __init__(self, step: str, error: dict[str, str]) -> None:
        super().__init__(f"step {step} failed: {error.get('type', 'Error')}: "
                         f"{error.get('message', '')}")
        self.step = step
        self.error = error
