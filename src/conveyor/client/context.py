"""The running job's context: ``current_job()`` from inside job code, messages and progress.

The worker builds a ``JobContext`` per execution and wraps the run in ``activate(ctx)``. The
context lives in a ``contextvars.ContextVar``, so it is right both for a job run in a pool
thread (the worker activates it in that thread) and for an ``async def`` job (each asyncio task
has its own copy of the context).

Messages and progress are buffered here, never written by job code directly: the worker
drains them into the acknowledgement (or a live ``Storage.log`` call for long jobs), so a job
that logs in a tight loop costs no storage round trip per line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from conveyor.client.durable import DurableCalls, DurableReach
from conveyor.core.clock import SYSTEM_CLOCK, Clock
from conveyor.core.job import Event, EventKind, JobRecord, JobSpec, LeasedJob
from conveyor.core.serializer import decode_payload

if TYPE_CHECKING:
    from conveyor.client.refs import JobRef

__all__ = ["BatchScope", "Callee", "JobContext", "JobRuntime", "WorkflowScope", "activate",
           "current_batch", "current_job", "pop_batch", "push_batch"]


class WorkflowScope(Protocol):
    """The workflow a running job belongs to, as job code sees it (``current_job().workflow``;
    ``conveyor.workflow.running.RunningWorkflow``): nodes can be added to it while the job runs."""

    @property
    def id(self) -> str:
        """The workflow's id."""
        ...

    @property
    def node(self) -> JobRef:
        """The running job's own node (give it in ``after=`` to add its children)."""
        ...

    def add(self, step: Any, *, after: Any = (), on_parent_failure: str = "fail",
            results: bool | str = False, node_id: str | None = None) -> JobRef:
        """Add one node now; returns its ref."""
        ...

    def add_group(self, steps: Iterable[Any], *, after: Any = (),
                  on_parent_failure: str = "fail", results: bool | str = False) -> list[JobRef]:
        """Add several nodes with the same parents in one atomic step; returns their refs."""
        ...

    def add_workflow(self, sub: Any, *, after: Any = (), on_parent_failure: str = "fail",
                     results: bool | str = False) -> list[JobRef]:
        """Add a whole sub-workflow (or canvas) in one atomic step; returns its last nodes."""
        ...


class Callee(Protocol):
    """A job function as running code calls it by name (a ``JobFunction``)."""

    @property
    def func(self) -> Callable[..., Any]:
        """The function itself."""
        ...


@dataclass(frozen=True)
class JobRuntime:
    """What a running job reaches through its context, handed over by the app that runs it
    (``Conveyor.runtime``): its clock, a job function by name (what conveyor's own jobs call,
    ``builtin_jobs``), a stored job by id (what an errback reads), the workflow it is a
    node of (``current_job().workflow``) and what its durable calls reach (``durable``: the
    store's records, the app's job data rules; docs/durable.md). Explicit, so that no module
    below the app reaches into the app for them."""

    clock: Clock
    function: Callable[[str], Callee | None]
    record: Callable[[str], JobRecord | None]
    workflow: Callable[[JobContext], WorkflowScope]
    durable: DurableReach | None = None


class JobContext(DurableCalls):
    """What a running job knows about itself, and its channel back to the job's event log;
    its durable calls (``step``, ``sleep``, ``wait_for``, ``receive``, ``iterate``) come
    from ``DurableCalls`` (docs/durable.md).

    ``runtime`` is what it reaches beyond itself (``JobRuntime``); its events are stamped with
    ``clock``, or else the runtime's. ``ctx.app`` is the app the worker runs, for job code
    that wants it (docs/api.md); nothing in conveyor reads it.
    """

    def __init__(
        self,
        *,
        job_id: str,
        name: str,
        queue: str = "default",
        attempt: int = 1,
        errors: int = 0,
        batch_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
        worker_id: str = "",
        args: list[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        runtime: JobRuntime | None = None,
        app: Any = None,
        token: str = "",
    ) -> None:
        self.runtime = runtime
        self._reach = runtime.durable if runtime is not None else None
        self.clock: Clock = clock or (runtime.clock if runtime is not None else SYSTEM_CLOCK)
        self.app: Any = app  # the user's: typed Any so that this module needs no app type
        self.job_id = job_id
        self.name = name
        self.queue = queue
        self.attempt = attempt
        self.errors = errors
        self.batch_id = batch_id
        self.meta: dict[str, Any] = dict(meta or {})
        self.worker_id = worker_id
        self.args: list[Any] = list(args or [])
        self.kwargs: dict[str, Any] = dict(kwargs or {})
        self.token = token  # this run's lease: what it adds to a workflow is fenced by it
        self._workflow: WorkflowScope | None = None
        # log() may be called from threads the job starts itself.
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._progress: tuple[int, int] | None = None
        self._progress_dirty = False
        # A plain flag: one assignment is atomic, and a threading.Event per job costs more than
        # the rest of the context (the worker builds one per execution on its hot path).
        self._cancel = False
        # Seals the job's log lines on their way out when its data is sealed (the worker sets
        # it: docs/job-data.md); None writes them as they are.
        self.seal: Callable[[Event], Event] | None = None

    @classmethod
    def from_leased(cls, job: LeasedJob, worker_id: str = "", *,
                    runtime: JobRuntime | None = None, app: Any = None) -> JobContext:
        """The context for a leased job; raises ``PayloadError`` if its payload is damaged."""
        args, kwargs, meta = decode_payload(job.payload)
        return cls(
            runtime=runtime, app=app, job_id=job.id, name=job.name, queue=job.queue,
            attempt=job.attempt, errors=job.errors, batch_id=job.batch_id, meta=meta,
            worker_id=worker_id, args=args, kwargs=kwargs, token=job.token,
        )

    def __repr__(self) -> str:
        return f"<JobContext {self.name} id={self.job_id} attempt={self.attempt}>"

    def log(self, message: str, **data: Any) -> None:
        """Add a message to the job's event log (shown in the CLI, web UI and batch views).

        Keyword arguments are stored as the event's data; keep them JSON (others are stored
        as their ``str``).
        """
        event = Event(
            ts=self.clock.now(), kind=EventKind.MESSAGE, message=str(message),
            worker=self.worker_id or None, attempt=self.attempt, data=data or None,
        )
        with self._lock:
            self._events.append(event)

    def progress(self, done: int, total: int | None = None) -> None:
        """Report progress, e.g. ``ctx.progress(40, 100)``; ``total`` defaults to the last one
        given (0 means unknown)."""
        with self._lock:
            if total is None:
                total = self._progress[1] if self._progress else 0
            self._progress = (int(done), int(total))
            self._progress_dirty = True
            self._events.append(Event(
                ts=self.clock.now(), kind=EventKind.PROGRESS, worker=self.worker_id or None,
                attempt=self.attempt, data={"done": int(done), "total": int(total)},
            ))

    @property
    def workflow(self) -> WorkflowScope:
        """The workflow this job is a node of: ``current_job().workflow.add(step.s(),
        after=[current_job().node])`` adds a child while it runs (docs/workflows.md).
        ``RuntimeError`` outside a worker's app; adding raises ``WorkflowError`` when the job
        is not a workflow's node."""
        if self._workflow is None:
            if self.runtime is None:
                raise RuntimeError("current_job().workflow needs the job to run in a conveyor app")
            self._workflow = self.runtime.workflow(self)
        return self._workflow

    @property
    def node(self) -> JobRef:
        """This job's own node in its workflow (``self.workflow.node``)."""
        return self.workflow.node

    @property
    def cancelled(self) -> bool:
        """True once cancellation was requested; long jobs should check it and return early."""
        return self._cancel

    def request_cancel(self) -> None:
        """Called by the worker when the storage reports a cancellation request for this job."""
        self._cancel = True

    def merge(self, events: Iterable[Event], progress: tuple[int, int] | None) -> None:
        """Add messages and progress the job reported from elsewhere (its job process,
        docs/worker.md "Executors") to this buffer, as if logged here."""
        with self._lock:
            self._events.extend(events)
            if progress is not None:
                self._progress = progress
                self._progress_dirty = True

    def drain(self) -> tuple[tuple[Event, ...], tuple[int, int] | None]:
        """Hand the buffered events, and the progress if it changed, to the worker; clears both."""
        with self._lock:
            events, self._events = tuple(self._events), []
            progress = self._progress if self._progress_dirty else None
            self._progress_dirty = False
        if self.seal is not None and events:
            events = tuple(map(self.seal, events))
        return events, progress


class BatchScope(Protocol):
    """Where the client sends jobs enqueued inside ``with app.batch(...)`` (see ``batch.py``)."""

    @property
    def id(self) -> str:
        """The batch id every job enqueued in the block gets."""
        ...

    def add(self, spec: JobSpec, ref: JobRef | None = None) -> None:
        """Buffer a job of this batch; it is stored (and ``ref`` updated) at the next flush."""
        ...

    def reserve(self, count: int) -> None:
        """Make way for ``count`` jobs the client stores itself (the bulk path): the buffered
        jobs are stored first, so jobs keep their order, and ``count`` joins the tally."""
        ...


_current_job: ContextVar[JobContext | None] = ContextVar("conveyor_job", default=None)
_current_batch: ContextVar[BatchScope | None] = ContextVar("conveyor_batch", default=None)


def current_job() -> JobContext:
    """The context of the job running in this thread or task; ``RuntimeError`` outside a job."""
    ctx = _current_job.get()
    if ctx is None:
        raise RuntimeError("current_job() called outside a running conveyor job")
    return ctx


class activate:  # lower case: used like the function it replaced
    """Make ``ctx`` the current job for the duration of the block (the worker's wrapper).

    It also hides any batch block of the caller (e.g. ``conveyor.testing.drain`` run inside
    ``with app.batch()``), so jobs a job enqueues join a batch only when it says so.
    A class rather than a ``@contextmanager`` generator: it runs once per job, and this is a
    third of the cost.
    """

    __slots__ = ("_batch_token", "_ctx", "_job_token")

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx

    def __enter__(self) -> JobContext:
        self._job_token = _current_job.set(self._ctx)
        self._batch_token = _current_batch.set(None)
        return self._ctx

    def __exit__(self, *exc: object) -> None:
        _current_batch.reset(self._batch_token)
        _current_job.reset(self._job_token)


def current_batch() -> BatchScope | None:
    """The batch whose ``with`` block is active in this thread or task, if any."""
    return _current_batch.get()


def push_batch(scope: BatchScope) -> Token[BatchScope | None]:
    """Route enqueues in this context to ``scope`` until ``pop_batch`` (``Batch.__enter__``)."""
    return _current_batch.set(scope)


def pop_batch(token: Token[BatchScope | None]) -> None:
    """Undo the ``push_batch`` that returned ``token`` (``Batch.__exit__``)."""
    _current_batch.reset(token)
