"""The storage boundary: what every backend must do, atomically (docs/design.md).

``Storage`` is the hot path used by clients and workers, each method one atomic transition
per job (a Lua script, a transaction); ``Inspector`` is what the CLI, web UI and metrics use.

Rules every backend honours (checked by ``tests/conformance``):

* Times that decide leases, schedules and retention come from the storage's own clock
  (``now()``), never from a worker's.
* Every transition appends an ``Event`` to the job and moves the job's batch counters in the
  same atomic step (Redis: a second, idempotent step made *before* the acknowledgement).
* An ``Ack`` is applied only when its ``token`` is the job's current lease; otherwise it is
  refused (returns False) and an ``ack_refused`` event is recorded.
* Jobs whose lease expired go back to ``pending`` (``recovered``), and to ``dead`` after more
  than ``max_recoveries`` recoveries. A recovery is not an error attempt.
* A job whose ``deadline`` passed before it could start is moved to ``dead`` (``expired``) by
  ``dequeue`` and never handed out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Protocol, runtime_checkable

from conveyor.core.job import (
    Ack,
    BatchSpec,
    EnqueueResult,
    Event,
    HeartbeatReply,
    JobRecord,
    JobSpec,
    JobState,
    LeasedJob,
)
from conveyor.errors import TransactionUnsupported
from conveyor.storage.aio import Waiter
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.blocks import JobBlock
from conveyor.storage.durable import DurableStore
from conveyor.storage.inspector import Inspector as Inspector
from conveyor.storage.retention import Retention
from conveyor.storage.schedule_records import ScheduleInfo
from conveyor.storage.workers import WorkerInfo


@runtime_checkable
class Storage(Protocol):
    """The hot path. Each method is atomic per job; bulk methods take many jobs per call."""

    url: str
    #: A durable job's steps, waits and messages (``storage/durable.py``, docs/durable.md).
    durable: DurableStore

    def now(self) -> float:
        """The storage's clock, in epoch seconds: the only clock leases are compared with."""
        ...

    def enqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """Store jobs (pending, or scheduled when ``run_at`` is in the future).

        Bulk: one transaction per chunk. A spec with ``flow.unique_key`` whose lock is held
        returns the existing job's id with ``created=False``. A spec whose ``batch_id`` names a
        finished batch raises ``BatchClosedError``; an unknown batch, ``BatchNotFound``.
        Enqueuing an id that already exists is a no-op that returns ``created=False``.
        """
        ...

    async def aenqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """``enqueue`` for asyncio code; the event loop never blocks on it (storage/aio.py)."""
        ...

    async def aget_job(self, job_id: str) -> JobRecord | None:
        """``get_job`` for asyncio code."""
        ...

    async def aclose(self) -> None:
        """Close the asyncio clients this event loop opened."""
        ...

    def afinished(self, job_id: str, queue: str) -> AbstractAsyncContextManager[Waiter]:
        """While open, wake-ups when the job may have ended (``Waiter.wait``): what
        ``JobRef.aresult`` waits on between reads. A store that cannot notify only sleeps."""
        ...

    def enqueue_block(self, block: JobBlock) -> list[EnqueueResult]:
        """Store many jobs of one name and queue given as columns (the client's bulk path).

        Exactly ``enqueue(block.specs())``: the same records, events, batch counters, unique
        locks and results, only without a ``JobSpec`` per job on the way.
        """
        ...

    def dequeue(
        self, queues: Sequence[str], worker_id: str, count: int, lease_seconds: float,
        capacity: int = 0, acks: Sequence[Ack] = (),
    ) -> Leases:
        """Lease pending jobs whose costs add up to at most ``count`` (a job costs 1 unless
        it says more), taking from ``queues`` in the order given, each queue in its lineup's
        order (``storage/lineup.py``); a job costing more than ``capacity`` (the worker's
        slots; 0: no bound) is left for a larger worker.

        Paused queues are skipped, and flow-control limits are honoured. Each job becomes
        ``active`` with a ``started`` event, ``attempt`` + 1, and a fresh lease token.

        ``acks`` (a worker's outcomes carried with its next fetch) are applied first, as
        ``ack`` applies them, in the same round trip: a slot one of them frees is leased
        again by this call. Their results are ``Leases.acked``; one refused fences nothing
        else. An error storing one raises before anything is leased.
        """
        ...

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until work may be ready on ``queues`` (a job stored, made pending, or freed
        to run) or ``timeout`` passes; True when woken. A spurious wake-up is allowed, a
        missed one only delays by ``timeout``; a thread's waits in a row miss nothing between
        them. ``wait_dequeue`` is this and a lease; a broker's relay waits with it alone."""
        ...

    def wait_dequeue(
        self, watch: Sequence[str], queues: Sequence[str], worker_id: str, count: int,
        lease_seconds: float, timeout: float, capacity: int = 0, acks: Sequence[Ack] = (),
    ) -> Leases:
        """Block until a job may be ready on ``watch`` or ``timeout`` passes, then lease up to
        ``count`` slots' worth of jobs from ``queues`` as ``dequeue`` does; returns the leased
        jobs (maybe none). The lease is taken whether the wait was woken or timed out.
        ``acks`` are applied as ``dequeue`` applies them, before the wait: an ack never
        waits behind it.

        This is how an idle worker waits for work: it must not busy-poll the server (a
        spurious wake-up is allowed, a missed one only delays by ``timeout``). A backend that
        can lease in the same round trip as its wait does (single-server Redis pipelines the
        lease script behind the blocking pop).
        """
        ...

    def ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Apply outcomes (one per ``Ack``), each fenced by its lease token.

        Returns, per ack, True if applied and False if refused because the lease is gone.
        ``RETRY`` schedules the next run ``retry_in`` seconds after ``now()``.
        """
        ...

    def log(self, job_id: str, token: str, events: Sequence[Event],
            progress: tuple[int, int] | None = None) -> bool:
        """Append a running job's own messages and progress (live view); fenced like ``ack``."""
        ...

    def add_nodes(self, adder: str, token: str,
                  specs: Sequence[JobSpec]) -> list[EnqueueResult] | None:
        """Store workflow nodes the running job ``adder`` adds to its own workflow, fenced
        like ``ack`` (None, nothing stored, when ``token`` lost the lease). Each node counts
        only its parents not settled yet, in the step that links it into their children; one
        whose parents all settled is decided at once. An id stored already is left as it is
        (``created=False``). ``WorkflowError`` if ``adder`` or a parent is not a node."""
        ...

    def gather(self, lead: str, token: str) -> list[LeasedJob] | None:
        """Lease the members of ``lead``'s aggregation group for its run (None, nothing moved,
        when ``token`` lost the lease): up to the group's ``max_size - 1`` oldest
        ``aggregating`` members become ``active`` under the lead's token, worker and lease
        expiry, in one atomic step (storage/aggregation.py). A lead that is no member, or
        whose group is empty, gathers nothing."""
        ...

    def heartbeat(
        self, info: WorkerInfo, leases: Mapping[str, str], lease_seconds: float
    ) -> HeartbeatReply:
        """Register the worker and extend the leases it holds (job id → token) in one call.

        Returns the job ids whose lease is no longer this worker's, the ids whose
        cancellation was requested, and a pending remote command (consumed).
        """
        ...

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a worker from the registry at clean shutdown."""
        ...

    def promote_due(self, limit: int = 1000) -> int:
        """Move scheduled and retrying jobs whose time has come to pending; returns how many."""
        ...

    def save_schedules(self, schedules: Sequence[ScheduleInfo], by: str = "") -> None:
        """Write the periodic schedules a worker's code declares (``by``: the worker): a new
        one is created; an existing one keeps its pause state and last tick, and an operator's
        edit stands unless the code declares something new for it
        (``storage/schedule_edits.py``). Each change is one step with its audit entry."""
        ...

    def schedule_pauses(self) -> dict[str, float | None]:
        """Schedules an operator paused (``None``) or resumed (the storage time of the latest
        resume: schedulers never enqueue a tick that fell before it)."""
        ...

    def schedule_ticked(self, name: str, tick: float) -> None:
        """Record that the tick at ``tick`` was enqueued (never older than the one stored)."""
        ...

    def reclaim_expired(self, max_recoveries: int = 5, limit: int = 1000) -> int:
        """Put active jobs with expired (or missing) leases back to pending; returns how many."""
        ...

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """A worker died (its supervisor saw the process end): recover every job it holds
        now, as ``reclaim_expired`` would once their leases ran out, and unregister it.

        Same rules as a reclaim: pending again (``recovered``, not an error attempt), dead past
        ``max_recoveries``, cancelled when a cancel was requested; each lease token stops
        being valid, so a late ack, log or heartbeat of the dead worker is refused. Other
        workers' leases are untouched. Returns how many jobs were recovered.
        """
        ...

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a job: waiting states become ``cancelled``; an active job gets a cancellation
        request its worker sees at the next heartbeat. Returns the resulting state, or None
        when no such job exists."""
        ...

    def create_batch(self, spec: BatchSpec) -> None:
        """Create an open batch; jobs join it through ``JobSpec.batch_id``."""
        ...

    def close_batch(self, batch_id: str) -> None:
        """Mark a batch as fully enqueued: it completes once (or at once if) every job is
        terminal."""
        ...

    def batch_finished(self, batch_id: str) -> AbstractContextManager[BatchWaiter]:
        """While open, wake-ups when the batch may have finished (``BatchWaiter.wait``):
        what ``Batch.wait`` waits on between reads of the batch. Opened before the read it
        follows, so a finish between that read and the wait is not missed."""
        ...

    def trim(self, retention: Retention) -> int:
        """Delete finished jobs, batches and silent workers past retention; returns jobs removed."""
        ...

    def tidy(self) -> bool:
        """Upkeep the engine needs to keep its hot path fast, when it needs it; returns
        whether it did any. Every worker process's janitor calls it each second, so it must
        be cheap when there is nothing to do. PostgreSQL vacuums the jobs table once dead
        row versions pile up (``storage/postgres/vacuum.py``); the others have none."""
        ...

    def check_server(self) -> list[str]:
        """Warnings about server settings that can lose jobs (e.g. a Redis that may evict
        keys), one line each, for the worker to log at start; empty when all is well or
        there is no server to check. Raises ``StorageReadOnly`` when this client can read
        but not write: a worker could not take a single job."""
        ...

    def bind(self, connection: object) -> Storage:
        """This storage writing inside the caller's own open transaction on ``connection``
        (the application's database connection): jobs and batches stored through the result
        exist if and only if that transaction commits (``app.transaction``).

        Only writes (``enqueue``, ``enqueue_block``, ``create_batch``, ``close_batch``) are
        made through it. A backend that cannot write through ``connection`` raises
        ``TransactionUnsupported`` with one line saying why.
        """
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...


class Sent(Protocol):
    """A block on its way to the storage (``Ready.send``)."""

    def result(self) -> Sequence[EnqueueResult]:
        """Wait until the block is stored and return its results (or raise its error)."""
        ...


class Ready(Protocol):
    """A block made ready to store (``SendsBlocks.prepare_block``)."""

    def ahead(self) -> None:
        """Called while the block before this one is still being stored (never for the
        first block of a call): do now what may happen then. On Redis a block of a batch
        joins the batch here, so the join's round trip overlaps the previous block's script
        call instead of leaving Redis idle before this block's. If the block before fails,
        the jobs of this one have joined and are never stored, as that block's own have."""
        ...

    def send(self) -> Sent:
        """Start storing the block as ``Storage.enqueue_block`` does; the rest happens in
        ``result()``, which the caller always calls (an error is raised there or here)."""
        ...


@runtime_checkable
class SendsBlocks(Protocol):
    """A storage that stores a block while its caller builds the next one, without a
    thread (Redis: the script call is written to the connection, its reply read later).

    The client's bulk path makes block k+1 ready while block k is stored, and sends it once
    block k's results are in: blocks are stored one after the other, in order. A storage
    without ``prepare_block`` has ``enqueue_block`` run in a thread of the client's own.
    """

    def prepare_block(self, block: JobBlock) -> Ready:
        """Do what storing ``block`` needs before anything is written (encoding, packing),
        so that it can be sent the moment the block before it is stored."""
        ...


def transactions_refused(url: str, connection: object) -> TransactionUnsupported:
    """What ``Storage.bind`` raises on a backend that is not the application's database
    (memory, SQLite, Redis): a job cannot be part of a transaction on another server."""
    scheme = url.partition("://")[0] or "this"
    return TransactionUnsupported(
        f"a {scheme}:// storage cannot enqueue in your database transaction "
        f"(got {type(connection).__name__}); only a postgresql:// storage on the same "
        "database as the connection can")


class Leases(list[LeasedJob]):
    """What ``dequeue`` and ``wait_dequeue`` return: the leased jobs, as a list (what every
    caller of a lease reads), and ``acked``, the result of each ack carried with the call
    (``Storage.ack``'s: True applied, False refused), in order."""

    def __init__(self, jobs: Iterable[LeasedJob] = (), acked: Sequence[bool] = ()) -> None:
        super().__init__(jobs)
        self.acked: list[bool] = list(acked)


class WaitsThenDequeues:
    """``Storage.wait_dequeue`` for a backend whose lease costs no extra round trip (memory,
    SQLite, PostgreSQL): its own ``ack`` (carried acks never wait behind the wait), its
    ``wait``, then ``dequeue``. A part of those storages."""

    def __init__(self, wait: Callable[[Sequence[str], float], bool],
                 dequeue: Callable[[Sequence[str], str, int, float, int], list[LeasedJob]],
                 ack: Callable[[Sequence[Ack]], list[bool]]) -> None:
        self.wait = wait
        self.dequeue = dequeue
        self.ack = ack

    def wait_dequeue(
        self, watch: Sequence[str], queues: Sequence[str], worker_id: str, count: int,
        lease_seconds: float, timeout: float, capacity: int = 0, acks: Sequence[Ack] = (),
    ) -> Leases:
        """Apply ``acks``, wait on ``watch``, then lease from ``queues``."""
        acked = self.ack(acks) if acks else []
        self.wait(watch, timeout)
        return Leases(self.dequeue(queues, worker_id, count, lease_seconds, capacity), acked)
