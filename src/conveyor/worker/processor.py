"""Processor: turns one leased job into an ``Ack`` — decode, look up, run, map the outcome.

The same path serves worker threads, the asyncio loop and ``conveyor.testing.drain``, so a
user's tests exercise exactly what production runs. Nothing here raises: every way a job can
end, including bad input, becomes an ``Ack`` (DESIGN §7: no crash loop on bad input).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import traceback
from typing import Any

from conveyor.app import Conveyor
from conveyor.client.context import JobContext, activate
from conveyor.core.clock import Clock
from conveyor.core.job import Ack, ErrorInfo, LeasedJob, Outcome
from conveyor.core.retry import backoff
from conveyor.core.serializer import oversize
from conveyor.errors import (
    BlobUnavailable,
    Fail,
    Handback,
    JobTimeout,
    NotAJob,
    PayloadError,
    Retry,
    RetryAfter,
    Suspend,
    TypedDataError,
    UnknownJobError,
)
from conveyor.worker.aggregation import AggregatorRuns
from conveyor.worker.inflight import Entry
from conveyor.worker.reporting import report_outcome
from conveyor.worker.sealing import Sealer, Unrunnable, open_call
from conveyor.worker.versions import Incompatible, VersionGate, leave_delay

__all__ = ["Processor", "error_info"]

log = logging.getLogger("conveyor.worker")


def error_info(exc: BaseException) -> ErrorInfo:
    """Type, message and traceback of an exception, as stored with the job."""
    cls = type(exc)
    name = cls.__qualname__
    if cls.__module__ != "builtins":
        name = f"{cls.__module__}.{name}"
    text = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
    return ErrorInfo(type=name, message=str(exc), traceback=text)


class Processor:
    """Runs jobs of one app for one worker id; stateless between jobs, safe across threads."""

    def __init__(self, app: Conveyor, worker_id: str, clock: Clock,
                 executor: str = "thread") -> None:
        self.app = app
        self.worker_id = worker_id
        self.clock = clock
        self.executor = executor  # where def jobs run unless their options say
        self.aggregator_runs = AggregatorRuns(self)

    def prepare(self, job: LeasedJob) -> Entry | Ack:
        """Decode the payload and find the function; an ``Ack`` (dead) when either fails."""
        if job.unreadable is not None:
            return self._dead(job, PayloadError(f"unreadable: {job.unreadable}"))
        try:
            fn = self.app.registry.get(job.name)
        except NotAJob as refused:  # never runnable here: no retry can help
            return self._dead(job, refused)
        if fn is None:
            return self._unknown(job)
        aggregator = self.app.registry.aggregator(job.name)
        if aggregator is None and fn.opts.aggregate is not None:
            return self._unknown(job, "no aggregator for")
        if aggregator is not None:
            fn = aggregator
        data = self.app.client.data
        gate = None if fn.opts.version is None or aggregator is not None \
            else VersionGate(self.app.storage, job, fn)
        try:
            args, kwargs, meta, stored, named = open_call(
                data, job, fn, None if gate is None else gate.migrate)
        except Unrunnable as bad:  # a key not held, a blob gone, a typed argument wrong
            return self._dead(job, bad)
        except BlobUnavailable as down:  # the blob store does not answer: try again later
            return self._later(job, down)
        except Incompatible as other:  # another version's job: left, no attempt spent
            log.info("%s", other)
            return Ack(job.id, job.token, Outcome.SNOOZE, message=str(other),
                       retry_in=leave_delay(job.attempt))
        ctx = JobContext(
            job_id=job.id, name=job.name, queue=job.queue, attempt=job.attempt,
            errors=job.errors, batch_id=job.batch_id, meta=meta, worker_id=self.worker_id,
            args=stored, kwargs=named, runtime=self.app.runtime, app=self.app,
            token=job.token,
        )
        ctx.event_window = fn.opts.event_window
        if gate is not None:
            ctx.version, ctx._records = fn.opts.version, gate.records
        if data.seals(job.name):
            ctx.seal = Sealer(data, job.id, job.name).event
        now = self.clock.now()
        timeout = job.timeout if job.timeout is not None else fn.opts.timeout
        deadline = now + timeout if timeout else None
        aggregated = aggregator is not None
        executor = "thread" if aggregated else fn.opts.executor or self.executor
        return Entry(job, fn, ctx, args, kwargs, started=now, deadline=deadline, logged_at=now,
                     aggregator=aggregated, executor=executor)

    def _unknown(self, job: LeasedJob, what: str = "no job named") -> Ack:
        """A job this worker's code does not define: an error retried with the default
        backoff, dead only after its retry budget. In a rolling deploy an old worker meets
        jobs of the new code; a new worker takes the retry [Sidekiq]."""
        return self._later(job, UnknownJobError(
            f"{what} {job.name!r} in this worker; retrying — is the worker running the new "
            "code?"))

    def _later(self, job: LeasedJob, exc: Exception) -> Ack:
        """A job that cannot run here now (its function unknown, its blob store not
        answering): an error retried with the default backoff, dead after its retry budget."""
        if job.errors >= job.max_retries:
            return self._dead(job, exc)
        log.warning("job %s: %s", job.id, exc)
        return Ack(job.id, job.token, Outcome.RETRY, message=str(exc), error=error_info(exc),
                   retry_in=backoff(job.errors + 1), ran=False)

    def _dead(self, job: LeasedJob, exc: Exception) -> Ack:
        ack = Ack(job.id, job.token, Outcome.DEAD, message=str(exc), error=error_info(exc),
                  ran=False)
        report_outcome(self.app, job, exc, ack)
        return ack

    def run(self, entry: Entry) -> Ack:
        """Run a sync job in this thread, through the server middleware."""
        if entry.aggregator:
            return self.aggregator_runs.run(entry)
        if entry.ctx.cancelled:
            return self.unstarted(entry)
        call = functools.partial(entry.fn.func, *entry.args, **entry.kwargs)
        try:
            with activate(entry.ctx):
                result = self.app.server_middleware.run(entry.ctx, call)
        except BaseException as exc:  # a pool thread must outlive any job
            return self.failure(entry, exc)
        return self.success(entry, result)

    async def run_async(self, entry: Entry) -> Ack:
        """Run an ``async def`` job on the current loop, cancelled at its timeout."""
        if entry.aggregator:
            return await self.aggregator_runs.run_async(entry)
        if entry.ctx.cancelled:
            return self.unstarted(entry)

        async def call() -> Any:
            return await entry.fn.func(*entry.args, **entry.kwargs)

        timeout = None if entry.deadline is None else entry.deadline - entry.started
        try:
            with activate(entry.ctx):
                coro = self.app.server_middleware.run_async(entry.ctx, call)
                result = await asyncio.wait_for(coro, timeout) if timeout else await coro
        except asyncio.CancelledError as exc:
            if not entry.ctx.cancelled:
                raise  # the loop is shutting down: the launcher acks INTERRUPTED
            return self.failure(entry, exc)
        except asyncio.TimeoutError as exc:
            # wait_for's own timeout is chained from the CancelledError it caused; a
            # TimeoutError raised by the job's code is an ordinary error.
            if isinstance(exc.__cause__, asyncio.CancelledError):
                return self.failure(entry, self.timeout_error(entry))
            return self.failure(entry, exc)
        except BaseException as exc:  # the event loop must outlive any job
            return self.failure(entry, exc)
        return self.success(entry, result)

    def unstarted(self, entry: Entry) -> Ack:
        """CANCELLED without running: the cancel came between the job's lease and its start
        (for an async job, before its task existed for the heartbeat to cancel)."""
        return self.ack(entry, Outcome.CANCELLED, message="cancelled before it started")

    def success(self, entry: Entry, result: Any) -> Ack:
        """SUCCEEDED with the JSON result (CANCELLED when cancellation was requested)."""
        if entry.ctx.cancelled:
            return self.ack(entry, Outcome.CANCELLED, message="cancelled while running")
        job = entry.job
        try:
            if result is not None and not entry.aggregator and entry.member is None \
                    and entry.fn.opts.aggregate is None:
                result = entry.fn.shape.dump_result(result)  # a typed return: made JSON
            # most jobs return nothing
            text = "null" if result is None else self.app.client.data.encode_result(
                job.id, job.name, result)
        except TypedDataError as exc:
            return self.failure(entry, exc)
        except PayloadError as exc:
            bad = PayloadError(
                f"job {entry.job.name} returned a value that is not JSON ({exc}); "
                "return only JSON values (dict, list, str, int, float, bool, None)"
            )
            return self.failure(entry, bad)
        except BlobUnavailable as exc:
            return self.failure(entry, exc)
        size = oversize(text, self.app.max_payload)
        if size:  # the size rule of arguments, for what the job hands back
            return self._too_large(entry, size)
        return self.ack(entry, Outcome.SUCCEEDED, result=text)

    def _too_large(self, entry: Entry, size: int) -> Ack:
        """A result over ``max_payload`` ends the job dead at once: stored, it would be
        handed whole to every reader and child; run again, the job would most likely return
        the same (docs/api.md, "Size")."""
        job = entry.job
        exc = PayloadError(f"job {job.name} {job.id} returned {size:,} bytes, over max_payload "
                           f"({self.app.max_payload:,} bytes); store large results elsewhere "
                           "and return a reference")
        ack = self.ack(entry, Outcome.DEAD, message=str(exc), error=error_info(exc))
        report_outcome(self.app, job, exc, ack, entry.args, entry.kwargs)
        return ack

    def failure(self, entry: Entry, exc: BaseException) -> Ack:
        """Map an exception to FAILED, RETRY, DEAD or CANCELLED; log it, call error hooks.
        A durable job's control flow is no error: a sleep or wait leaves the worker
        (SUSPENDED), a loop stopped at its checkpoint goes back (INTERRUPTED) or ends
        cancelled (docs/durable.md)."""
        if isinstance(exc, Suspend):
            return self.ack(entry, Outcome.SUSPENDED, resume_at=exc.until, message=exc.reason)
        if isinstance(exc, Handback):
            outcome = Outcome.CANCELLED if entry.ctx.cancelled else Outcome.INTERRUPTED
            return self.ack(entry, outcome, message=str(exc))
        ack = self._failure(entry, exc)
        report_outcome(self.app, entry.job, exc, ack, entry.args, entry.kwargs)
        return ack

    def _failure(self, entry: Entry, exc: BaseException) -> Ack:
        ack = self._failed(entry, exc)
        if not self.app.client.data.seals(entry.job.name):
            return ack
        sealer = Sealer(self.app.client.data, entry.job.id, entry.job.name)
        # The job's own words (its exception, Fail and Retry messages) are its data.
        return dataclasses.replace(ack, message=sealer.text(ack.message),
                                   error=sealer.error(ack.error))

    def _failed(self, entry: Entry, exc: BaseException) -> Ack:
        job = entry.job
        if entry.ctx.cancelled and isinstance(exc, asyncio.CancelledError):
            # The worker itself cancelled the task at the request: no error of the job's.
            return self.ack(entry, Outcome.CANCELLED, message="cancelled while running")
        # Anything else is acknowledged as it ended, whether or not the request had reached
        # the job: the storage ends an error attempt ``cancelled: <error>`` (still counted),
        # and a ``Fail`` stands (docs/api.md, "Job lifecycle rules"), on every backend alike.
        if isinstance(exc, Fail):
            return self.ack(entry, Outcome.FAILED, message=exc.message or type(exc).__name__)
        if isinstance(exc, NotAJob):  # a stored name that is not a job: never retried
            info = error_info(exc)
            return self.ack(entry, Outcome.DEAD, message=info.message, error=info)
        if isinstance(exc, RetryAfter):  # a wait, not an error: the retry budget is untouched
            message = exc.message or f"retry after {exc.seconds:g}s"
            return self.ack(entry, Outcome.SNOOZE, message=message, retry_in=exc.seconds)
        if isinstance(exc, Retry):  # counts as an attempt, so it ends too
            message = exc.message or "retry requested"
            if job.errors >= job.max_retries:
                return self.ack(entry, Outcome.DEAD, message=f"{message} (no retries left)")
            delay = exc.in_seconds if exc.in_seconds is not None else backoff(job.errors + 1)
            return self.ack(entry, Outcome.RETRY, message=message,
                             retry_in=max(0.0, float(delay)))
        info = error_info(exc)
        # The message keeps the exception's class: a KeyError's text alone is a bare key.
        message = f"{type(exc).__name__}: {info.message}" if info.message \
            else type(exc).__name__
        if job.errors < job.max_retries:
            return self.ack(entry, Outcome.RETRY, message=message, error=info,
                             retry_in=self.retry_delay(entry, exc))
        return self.ack(entry, Outcome.DEAD, message=message, error=info)

    def retry_delay(self, entry: Entry, exc: BaseException) -> float:
        """Seconds before the next attempt: the job's ``retry_in`` or the default backoff."""
        attempt = entry.job.errors + 1
        custom = entry.fn.opts.retry_in
        if custom is not None:
            try:
                return max(0.0, float(custom(attempt, exc)))
            except Exception:
                log.exception("retry_in of job %s failed; using the default backoff",
                              entry.job.name)
        return backoff(attempt)

    def timeout_error(self, entry: Entry) -> JobTimeout:
        """The error recorded for a job that ran past its timeout."""
        limit = 0.0 if entry.deadline is None else entry.deadline - entry.started
        return JobTimeout(f"job {entry.job.name} ran longer than its timeout of {limit:g}s")

    def timed_out(self, entry: Entry) -> Ack:
        """The ack for a thread job the watchdog gave up on (the thread is abandoned)."""
        return self.aggregator_runs.end(entry, exc=self.timeout_error(entry))

    def interrupted(self, entry: Entry) -> Ack:
        """The ack of hard shutdown: the storage puts the job back to pending."""
        return self.aggregator_runs.each(entry, lambda e: self.ack(
            e, Outcome.INTERRUPTED, message="worker shut down before the job ended"))

    def ack(self, entry: Entry, outcome: Outcome, **fields: Any) -> Ack:
        events, progress = entry.ctx.drain()
        return Ack(entry.job.id, entry.job.token, outcome, events=events, progress=progress,
                   **fields)
