"""``Conveyor``: the application object users create once and import in their code and workers.

::

    app = Conveyor("sqlite:///jobs.db")

    @app.job(queue="mail", retry=5)
    def send_welcome(user_id: int) -> None: ...

    send_welcome.enqueue(42)

For asyncio code every call that reaches the storage has a twin with an ``a`` in front, as
Django's tasks API and Python's own ``aclose``/``anext`` spell them (docs/api.md, "asyncio"):
enqueues use the storage's asyncio I/O (native on Redis and PostgreSQL, a thread on SQLite
and memory); reads and operator actions run the blocking call in a thread, so an event loop
never waits on the storage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, overload

from conveyor.client.batch import Batch, Callback, await_batch, batch_status, wait_batch
from conveyor.client.client import Client
from conveyor.client.context import JobRuntime
from conveyor.client.decorators import JobDecorators
from conveyor.client.explain import Explanation, explain
from conveyor.client.messaging import Messaging
from conveyor.client.middleware import ClientChain, ServerChain
from conveyor.client.opener import StorageOpener
from conveyor.client.options import JobOptionArgs
from conveyor.client.payloads import JobData, Offload, app_data
from conveyor.client.refs import JobRef
from conveyor.client.registry import JobFunction, Registry
from conveyor.client.schedules import Schedules
from conveyor.core.clock import SYSTEM_CLOCK, Clock
from conveyor.core.encryption import Keys
from conveyor.core.job import JobRecord, JobState
from conveyor.core.serializer import DEFAULT_MAX_PAYLOAD
from conveyor.hooks import ErrorHandler
from conveyor.storage import DEFAULT_URL, Backend, Retention, redact
from conveyor.storage.aio import Waiter
from conveyor.workflow.canvas import CANVAS
from conveyor.workflow.graph import Workflow
from conveyor.workflow.running import RunningWorkflow

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the package runs on 3.10
    from typing_extensions import Unpack

__all__ = ["Conveyor"]


class Conveyor:
    """A job application: its storage, registered jobs and middleware.

It wires the parts: a ``Registry`` of job functions, a ``Client`` (``app.client``) that
enqueues them through the client middleware, the server middleware and error handlers the
worker runs jobs with, and the storage.

    ``url`` names the storage (``sqlite:///path.db``, ``redis://…``, ``memory://``); None
    means ``$CONVEYOR_URL`` or ``sqlite:///conveyor.db``; ``broker`` names a message broker
    that delivers jobs to workers (docs/internals/broker.md). The storage is opened on first use
    and opened again in a child process after ``fork`` (so worker processes never share a
    connection with their parent); a ``storage=`` object given here is used as is.
    ``encrypt=Keys(...)`` seals job data before it reaches the store, ``offload=Offload()``
    keeps large data in a blob store by reference (docs/job-data.md).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        storage: Backend | None = None,
        broker: str | None = None,
        clock: Clock | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        retention: Retention = Retention(),  # noqa: B008 - frozen dataclass, safe as a default
        encrypt: Keys | None = None,
        offload: Offload | None = None,
    ) -> None:
        #: Where ``url`` came from: "the app" (or its storage), "CONVEYOR_URL", "the default".
        self.url_from = "the app"
        if url is None:
            env = os.environ.get("CONVEYOR_URL")
            url = storage.url if storage is not None else env or DEFAULT_URL
            if storage is None:
                self.url_from = "CONVEYOR_URL" if env else "the default"
        self.url = url
        #: Where workers take jobs from when a message broker delivers them (``memory://``
        #: for now; docs/internals/broker.md): ``broker``, else ``$CONVEYOR_BROKER``, else none —
        #: workers lease from the store. Enqueueing never needs it: the store is the outbox.
        self.broker_url: str | None = broker or os.environ.get("CONVEYOR_BROKER") or None
        self.retention = retention
        self.registry = Registry()
        self.client = Client(
            lambda: self.storage, self.registry, clock=clock or SYSTEM_CLOCK,
            max_payload=max_payload, canvas=CANVAS,
            data=app_data(encrypt, offload, lambda: self.url, max_payload),
        )
        self.registry.add_builtins(self.client)
        #: What a running job reaches through its context (``JobRuntime``): handed to every
        #: ``JobContext`` the worker builds, so nothing below the app reaches into it.
        self.runtime = JobRuntime(clock=self.client.clock, function=self.registry.get,
                                  record=self.get_job,
                                  workflow=lambda ctx: RunningWorkflow(ctx, self.client),
                                  durable=self.client)
        #: ``send`` and ``send_event``: messages and events to durable jobs (docs/durable.md)
        self.messaging = Messaging(self.client)
        #: Declared in code (iterate it), and the store's, changed at run time (its methods)
        self.schedules = Schedules(lambda: self.storage, self.registry.options)
        #: What ``job``, ``aggregate`` and ``periodic`` do (``conveyor.client.decorators``)
        self._decorators = JobDecorators(self.client, self.registry, self.schedules)
        self.server_middleware = ServerChain()
        self.error_handlers: list[ErrorHandler] = []  # see on_error
        self._opener = StorageOpener(storage)

    def __repr__(self) -> str:
        return f"<Conveyor {redact(self.url)} jobs={len(self.registry)}>"

    # The client owns what enqueueing needs; the app exposes them under their old names.
    @property
    def clock(self) -> Clock:
        """The clock this process stamps schedules and events with (the storage's own decides
        leases)."""
        return self.client.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.client.clock = clock
        self.runtime = dataclasses.replace(self.runtime, clock=clock)

    @property
    def max_payload(self) -> int:
        """The largest payload an enqueue may store, in bytes."""
        return self.client.max_payload

    @max_payload.setter
    def max_payload(self, limit: int) -> None:
        self.client.max_payload = limit

    @property
    def client_middleware(self) -> ClientChain:
        """The client middleware chain every enqueue passes through (``app.client.middleware``)."""
        return self.client.middleware

    @client_middleware.setter
    def client_middleware(self, chain: ClientChain) -> None:
        self.client.middleware = chain

    @property
    def data(self) -> JobData:
        """What this app does to job data: its keys and offload (``conveyor.client.payloads``)."""
        return self.client.data

    @property
    def storage(self) -> Backend:
        """The storage backend, opened on first use (and again after a fork)."""
        return self._opener.get(self.url, self.clock)

    def opened_storage(self) -> Backend | None:
        """The storage this process holds already (``storage=``, or opened by a use), or
        None: a command that only reads then opens the URL without creating a store."""
        return self._opener.opened()

    def close(self) -> None:
        """Close the storage if this process opened it. The app can be used again afterwards."""
        self.client.close()  # its bulk threads first: they may be storing
        self.client.data.close()
        self._opener.close()

    async def aclose(self) -> None:
        """Close the asyncio clients this event loop opened (``close`` closes the rest)."""
        await self.storage.aclose()

    # -- registration -----------------------------------------------------------------------

    @overload
    def job(self, func: Callable[..., Any], /) -> JobFunction: ...

    @overload
    def job(self, func: None = None, /, *, name: str | None = None,
            **options: Unpack[JobOptionArgs]) -> Callable[[Callable[..., Any]], JobFunction]: ...

    def job(self, func: Callable[..., Any] | None = None, /, *, name: str | None = None,
            **options: Unpack[JobOptionArgs]
            ) -> JobFunction | Callable[[Callable[..., Any]], JobFunction]:
        """Register a job function; use as ``@app.job`` or ``@app.job(queue=..., ...)``.

        Each option is in docs/api.md, "Options": ``queue``; ``retry`` (25; False: an error
        goes straight to dead); ``timeout``; ``expires_in``; ``retry_in(attempt, exc)``; the
        limits ``unique_for``/``unique_key``, ``concurrency``/``concurrency_key``,
        ``rate_limit``/``rate_period``/``rate_key``, ``order_key``, ``debounce``,
        ``throttle`` (keys: strings, or callables given the job's arguments); ``aggregate``
        (docs/aggregation.md); ``executor``; ``priority``, ``aging``, ``fair_by``, ``cost``
        (docs/scheduling.md); ``event_window`` (docs/durable.md); ``version``, ``accepts``
        (safe deploys); ``breaker`` (docs/operations.md, "Breakers").
        """
        return self._decorators.job(func, name=name, **options)

    def on_error(self, handler: ErrorHandler) -> ErrorHandler:
        """Call ``handler(report)`` in the worker for every job error and death.

        ``report`` is a ``conveyor.hooks.ErrorReport``: the job (id, name, queue, args,
        kwargs, attempt), the exception and ``will_retry``. Use it as ``app.on_error(fn)`` or
        as a decorator. Hooks run in the thread (or event loop) that ran the job, so keep them
        quick; an exception raised by a hook is logged and never changes the job's outcome.
        """
        self.error_handlers.append(handler)
        return handler

    def aggregate(
        self, job: JobFunction | str
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the aggregator of an aggregated job: ``@app.aggregate(notify)`` over
        ``def send_digest(members: list[Member]) -> Any``. It runs once per run of an
        aggregation, with the members (``conveyor.Member``); each member ends by the outcome
        the aggregator gave it (``member.fail(...)``), else succeeded with the return value
        as its result, or, when it raised, by its own retry rules (docs/aggregation.md)."""
        return self._decorators.aggregate(job)

    def periodic(
        self,
        cron: str,
        *,
        tz: str = "UTC",
        name: str | None = None,
        queue: str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **job_options: Any,
    ) -> Callable[[Callable[..., Any] | JobFunction], JobFunction]:
        """Run a job on a cron schedule: ``@app.periodic("*/5 * * * *", tz="Europe/Berlin")``.

        Every worker runs the schedule; each tick is enqueued exactly once however many run,
        and a tick missed while all workers were down is enqueued when one comes back (within
        five minutes). ``name`` names the schedule (default: the job's name) in
        ``conveyor periodic list|pause|resume`` and the dashboard; ``queue`` is where its
        ticks go (default: the job's queue); ``args``/``kwargs`` are the job's arguments.

        On a plain function it registers the job too, and other keywords are job options
        (``retry``, ``timeout``, ``concurrency``, ...). Put it above ``@app.job`` to use that
        job as it is (other keywords are then refused). The job's options apply to every
        tick, except that its unique key is replaced by the tick's. Raises ``ValueError`` for
        a bad cron expression or time zone, or a schedule name used twice.
        """
        return self._decorators.periodic(cron, tz, name, queue, args, kwargs, job_options)

    # -- enqueue ----------------------------------------------------------------------------

    def enqueue(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        delay: float | timedelta | None = None,
        at: datetime | float | None = None,
        connection: object = None,
        **options: Unpack[JobOptionArgs],
    ) -> JobRef | None:
        """Enqueue a job by name (for operators and other services); ``options`` are those of
        ``job`` and override the registered job's; ``connection`` as in ``transaction``.
        Returns None if a middleware stopped it."""
        return self.client.enqueue(name, args, kwargs, meta=meta, delay=delay, at=at,
                                   connection=connection, **options)

    async def aenqueue(
        self, name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
        meta: Mapping[str, Any] | None = None, delay: float | timedelta | None = None,
        at: datetime | float | None = None, **options: Any,
    ) -> JobRef | None:
        """``enqueue`` (by name) for asyncio code."""
        return await self.client.aenqueue(name, args, kwargs, meta=meta, delay=delay, at=at,
                                          **options)

    def transaction(self, connection: object) -> AbstractContextManager[None]:
        """``with app.transaction(conn):`` every enqueue in the block (jobs, ``enqueue_many``,
        batches) is written in the open transaction of ``conn``, your own connection to the
        database the jobs are stored in (a psycopg connection, a SQLAlchemy Connection or
        Session, a Django connection): the jobs exist if and only if it commits.

        Storages that are not that database raise ``TransactionUnsupported``.
        """
        return self.client.transaction(connection)

    # -- jobs -------------------------------------------------------------------------------

    def get_job(self, job_id: str) -> JobRecord | None:
        """A stored job with its state and events, or None (sealed messages and errors
        opened: ``Client.get_job``)."""
        return self.client.get_job(job_id)

    async def aget_job(self, job_id: str) -> JobRecord | None:
        """``get_job`` for asyncio code."""
        return await self.client.aget_job(job_id)

    def afinished(self, job_id: str, queue: str) -> AbstractAsyncContextManager[Waiter]:
        """The storage's wake-ups when a job ends (what ``JobRef.aresult`` waits on)."""
        return self.client.afinished(job_id, queue)

    def explain(self, job_id: str) -> Explanation | None:
        """Why the job waits: each gate holding it back, in the order the fetch meets them,
        naming its holder or its time (``Explanation.lines()``); None for an unknown id
        (docs/scheduling.md)."""
        return explain(self.storage, job_id, broker=self.broker_url is not None)

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a waiting job, or ask a running one to stop; None if no such job."""
        return self.storage.cancel(job_id)

    async def acancel(self, job_id: str) -> JobState | None:
        """``cancel`` for asyncio code."""
        return await asyncio.to_thread(self.storage.cancel, job_id)

    # -- durable jobs: messages and events (docs/durable.md) ------------------------------

    def send(self, job_id: str, topic: str = "", data: Any = None, *,
             message_id: str | None = None) -> bool:
        """Send ``data`` to job ``job_id``'s inbox under ``topic`` (``Messaging.send``);
        False when the job has finished, ``JobNotFound`` when there is none."""
        return self.messaging.send(job_id, topic, data, message_id=message_id)

    def send_event(self, name: str, key: str = "", data: Any = None, *,
                   keep: float | None = None, event_id: str | None = None) -> int:
        """Deliver the event ``name``/``key`` to every job waiting for it, each once; how
        many it reached (``Messaging.send_event``)."""
        return self.messaging.send_event(name, key, data, keep=keep, event_id=event_id)

    # -- batches ----------------------------------------------------------------------------

    def batch(self, batch_id: str | None = None, *, description: str | None = None,
              on_complete: Callback = None, on_success: Callback = None,
              on_death: Callback = None, meta: Mapping[str, Any] | None = None) -> Batch:
        """A batch to fill in a ``with`` block (see ``conveyor.client.batch``); given ``batch_id``,
        re-opens that existing batch to add jobs."""
        return Batch(
            self.client, batch_id, description=description, on_complete=on_complete,
            on_success=on_success, on_death=on_death, meta=meta,
        )

    def workflow(self, *, description: str | None = None, on_complete: Callback = None,
                 on_success: Callback = None, on_death: Callback = None,
                 meta: Mapping[str, Any] | None = None) -> Workflow:
        """A workflow to build with ``add`` and store with ``enqueue``
        (``conveyor.workflow.graph``)."""
        return Workflow(self.client, description=description, on_complete=on_complete,
                        on_success=on_success, on_death=on_death, meta=meta)

    def batch_status(self, batch_id: str) -> dict[str, Any]:
        """The batch's counters, progress and timings (``BatchStatus.as_dict``), plus
        ``failures``: the first 10 failed or dead jobs with their arguments and message.
        Raises ``BatchNotFound``."""
        return batch_status(self.storage, batch_id)

    async def abatch_status(self, batch_id: str) -> dict[str, Any]:
        """``batch_status`` for asyncio code."""
        return await asyncio.to_thread(self.batch_status, batch_id)

    def wait_batch(self, batch_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Wait until the batch (or workflow) completes and return ``batch_status``;
        ``ResultTimeout`` after ``timeout`` seconds (None: no limit), ``BatchNotFound`` for
        an unknown id. Woken as it finishes where the store can tell
        (``conveyor.client.batch.wait_batch``)."""
        return wait_batch(self.storage, batch_id, timeout)

    async def await_batch(self, batch_id: str, timeout: float | None = None) -> dict[str, Any]:
        """``wait_batch`` for asyncio code (``conveyor.client.batch.await_batch``)."""
        return await await_batch(self.storage, batch_id, timeout)

    def batch_jobs(
        self, batch_id: str, state: JobState | str | None = None, offset: int = 0, limit: int = 50
    ) -> list[JobRecord]:
        """A page of the batch's jobs (optionally in one state), with their events."""
        return self.storage.list_jobs(
            state=JobState(state) if state is not None else None, batch_id=batch_id,
            offset=offset, limit=limit, with_events=True,
        )

