"""Aggregator runs (docs/aggregation.md): a leased lead gathers its aggregation's members
under its lease, the job's aggregator runs once with all of them, and every member is
acknowledged on its own: by the outcome the aggregator gave it, or by how the run ended.

The members' acks travel in the lead's ``Ack.bundle``, so whoever ends the run (the job, the
timeout watchdog, hard shutdown) ends every member with it, and the acker writes them
together. A member whose lease was lost alone (deleted by hand) is left out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol

from conveyor.aggregation.member import Member
from conveyor.client.context import activate
from conveyor.core.job import Ack, LeasedJob
from conveyor.errors import Fail, Retry
from conveyor.worker.inflight import Entry

__all__ = ["AggregatorRuns", "Runner"]


class Runner(Protocol):
    """What an aggregated run needs of the ``Processor`` that owns it."""

    app: Any  # the Conveyor: its storage and server middleware

    def prepare(self, job: LeasedJob) -> Entry | Ack: ...
    def success(self, entry: Entry, result: Any) -> Ack: ...
    def failure(self, entry: Entry, exc: BaseException) -> Ack: ...
    def interrupted(self, entry: Entry) -> Ack: ...
    def timeout_error(self, entry: Entry) -> Exception: ...


class AggregatorRuns:
    """Runs aggregated entries for one ``Processor``."""

    def __init__(self, processor: Runner) -> None:
        self.processor = processor

    def run(self, entry: Entry) -> Ack:
        """Gather, then run the aggregator in this thread through the server middleware."""
        try:
            members = self.gather(entry)
        except Exception as exc:  # the store failed: the lead retries, nobody was taken
            return self.processor.failure(entry, exc)
        if members is None:
            return self._lost(entry)
        call = functools.partial(entry.fn.func, members)
        try:
            with activate(entry.ctx):
                result = self.processor.app.server_middleware.run(entry.ctx, call)
        except BaseException as exc:  # a pool thread must outlive any job
            return self.end(entry, exc=exc)
        return self.end(entry, result=result)

    async def run_async(self, entry: Entry) -> Ack:
        """Gather (in a thread), then await the ``async def`` aggregator on this loop."""
        try:
            members = await asyncio.to_thread(self.gather, entry)
        except Exception as exc:
            return self.processor.failure(entry, exc)
        if members is None:
            return self._lost(entry)

        async def call() -> Any:
            return await entry.fn.func(members)

        timeout = None if entry.deadline is None else entry.deadline - entry.started
        try:
            with activate(entry.ctx):
                coro = self.processor.app.server_middleware.run_async(entry.ctx, call)
                result = await asyncio.wait_for(coro, timeout) if timeout else await coro
        except asyncio.CancelledError:
            if not entry.ctx.cancelled:
                raise  # the loop is shutting down: the launcher acks INTERRUPTED
            return self.end(entry, exc=asyncio.CancelledError())
        except asyncio.TimeoutError as exc:
            if isinstance(exc.__cause__, asyncio.CancelledError):
                return self.end(entry, exc=self.processor.timeout_error(entry))
            return self.end(entry, exc=exc)
        except BaseException as exc:
            return self.end(entry, exc=exc)
        return self.end(entry, result=result)

    def gather(self, entry: Entry) -> list[Member] | None:
        """Lease the members of the lead's aggregation (None: the lead's lease is lost); a
        member whose record cannot be read is acknowledged dead at once, the others become
        ``Member``s."""
        leased = self.processor.app.storage.gather(entry.job.id, entry.job.token)
        if leased is None:
            return None
        members, dead = self._prepare(leased)
        entry.members = members  # from here on the heartbeat extends their leases too
        entry.member = Member(entry.ctx)
        if dead:
            self.processor.app.storage.ack(dead)
        return [entry.member, *(m.member for m in members)]

    def _prepare(self, leased: list[LeasedJob]) -> tuple[list[Entry], list[Ack]]:
        members: list[Entry] = []
        dead: list[Ack] = []
        for job in leased:
            prepared = self.processor.prepare(job)
            if isinstance(prepared, Ack):
                dead.append(prepared)
                continue
            prepared.aggregator = False
            prepared.member = Member(prepared.ctx)
            members.append(prepared)
        return members, dead

    def end(self, entry: Entry, *, result: Any = None, exc: BaseException | None = None) -> Ack:
        """Every member's ack (the lead's, bundling the others'): its own outcome, else the
        run's."""
        return self.each(entry, lambda e: self._outcome(e, result, exc))

    def each(self, entry: Entry, make: Callable[[Entry], Ack]) -> Ack:
        """``make``'s ack of the lead, bundling ``make``'s ack of each member still held."""
        ack = make(entry)
        if not entry.members:
            return ack
        rest = tuple(make(m) for m in list(entry.members) if not m.lost)
        return dataclasses.replace(ack, bundle=rest)

    def _outcome(self, entry: Entry, result: Any, exc: BaseException | None) -> Ack:
        proc = self.processor
        mark = entry.member.outcome if isinstance(entry.member, Member) else None
        if mark is None:
            if exc is None:
                return proc.success(entry, result)
            if isinstance(exc, asyncio.CancelledError) and not entry.ctx.cancelled:
                # The run was cancelled for another member: this one is no error of its own.
                exc = RuntimeError("the aggregated run was cancelled")
            return proc.failure(entry, exc)
        kind, value = mark
        if kind == "done":
            return proc.success(entry, value)
        if kind == "fail":
            return proc.failure(entry, Fail(str(value)))
        if kind == "retry":
            message, seconds = value
            return proc.failure(entry, Retry(message or "retry requested", in_seconds=seconds))
        return proc.failure(entry, value)

    def _lost(self, entry: Entry) -> Ack:
        entry.lost = True  # the lease moved on before the gather: nothing may be acked
        return self.processor.interrupted(entry)
