"""Worker settings as one frozen value, and the queue order used for each fetch."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from conveyor.core.ids import new_id

__all__ = ["QueueWeight", "WorkerConfig", "make_worker_id", "parse_queue", "queue_order"]


@dataclass(frozen=True, slots=True)
class QueueWeight:
    """A queue a worker takes jobs from, and how often it is polled first (its weight)."""

    name: str
    weight: int = 1


def parse_queue(text: str) -> QueueWeight:
    """``"critical,3"`` → ``QueueWeight("critical", 3)``; raises ``ValueError`` with the reason."""
    name, sep, weight = text.strip().partition(",")
    name = name.strip()
    if not name:
        raise ValueError(f"queue {text!r} has no name")
    if not sep:
        return QueueWeight(name)
    try:
        value = int(weight)
    except ValueError:
        raise ValueError(f"queue weight in {text!r} is not a whole number") from None
    if value < 1:
        raise ValueError(f"queue weight in {text!r} must be at least 1")
    return QueueWeight(name, value)


def queue_order(
    queues: Sequence[QueueWeight], strict: bool, rng: random.Random | None = None
) -> list[str]:
    """Queue names in the order one fetch tries them.

    Strict keeps the given order. Otherwise a weighted random order without replacement
    (Efraimidis-Spirakis keys), so ``critical,3`` comes first three times as often as a weight
    1 queue, yet every queue is still tried on every fetch [sidekiq, asynq].
    """
    if strict or len(queues) < 2:
        return [q.name for q in queues]
    draw = (rng or random).random
    keyed = sorted(queues, key=lambda q: draw() ** (1.0 / q.weight), reverse=True)
    return [q.name for q in keyed]


def make_worker_id(pid: int, tag: str) -> str:
    """A worker id, ``host:pid:tag``; a supervisor makes its children's ids with the tag it
    drew before the fork, so the parent and the child compute the same one."""
    return f"{socket.gethostname()}:{pid}:{tag}"


def _default_worker_id() -> str:
    return make_worker_id(os.getpid(), new_id()[-6:])


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything a worker process needs to know; the CLI builds one from its flags.

    Intervals are seconds. ``lease`` must be comfortably longer than ``heartbeat_interval``
    so one slow heartbeat does not lose every lease.
    """

    queues: tuple[QueueWeight, ...] = (QueueWeight("default"),)
    strict: bool = False
    concurrency: int = 10
    shutdown_timeout: float = 25.0
    lease: float = 10.0
    heartbeat_interval: float = 2.0
    recover_interval: float = 1.0
    poll_interval: tuple[float, float] = (0.5, 1.0)
    janitor_interval: float = 300.0
    tidy_interval: float = 1.0
    log_flush_interval: float = 1.0
    idle_wait: float = 1.0
    max_recoveries: int = 5
    ack_batch: int = 500
    #: The longest an ack waits for the fetcher's next lease to carry it (one round trip
    #: for both, ``Storage.dequeue(acks=)``) before the acker writes it itself; none waits
    #: while the fetcher is in a blocking wait (worker/acker.py).
    ack_hold: float = 0.002
    #: Jobs leased ahead of the free slots (worker/reserve.py): at most what this process
    #: starts in ``reserve_window`` seconds at its recent pace, and at most ``reserve``
    #: (None: sixteen times ``concurrency``). ``reserve=0`` leases only for free slots.
    reserve: int | None = None
    reserve_window: float = 0.05
    #: With a broker (docs/internals/broker.md): messages the relay lets wait in each broker queue
    #: (0 = 16 times ``concurrency``, at least 1,024), how long at most it waits for news from
    #: the store when nothing was due, and after how long a published job not yet started is
    #: published again.
    relay_window: int = 0
    relay_idle: float = 0.25
    republish_after: float = 300.0
    #: Where ``def`` jobs run unless their own ``executor=`` says (docs/worker.md,
    #: "Executors"): ``"thread"`` (the pool), or ``"process"`` (job processes, killed at a
    #: job's timeout). ``app`` is the app as ``module:attribute`` for job processes to import
    #: ("" : found among the imported modules).
    executor: str = "thread"
    app: str = ""
    #: Recycling (docs/worker.md, "Recycling"): after this many jobs, or once its resident
    #: memory passes this many MiB after a job, a process that runs jobs is replaced (0: never).
    max_jobs_per_child: int = 0
    max_memory_per_child: int = 0
    worker_id: str = field(default_factory=_default_worker_id)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        if self.lease <= self.heartbeat_interval:
            raise ValueError(
                f"lease ({self.lease}s) must be longer than the heartbeat interval "
                f"({self.heartbeat_interval}s)"
            )
        if self.reserve is not None and self.reserve < 0:
            raise ValueError("reserve must be 0 or more")
        if self.reserve_window < 0:
            raise ValueError("reserve_window must be 0 or more seconds")
        if self.republish_after <= 0:
            raise ValueError("republish_after must be more than 0 seconds")
        if self.executor not in ("thread", "process"):
            raise ValueError(f"executor must be 'thread' or 'process', not {self.executor!r}")
        if self.max_jobs_per_child < 0 or self.max_memory_per_child < 0:
            raise ValueError("max jobs and max memory per child must be 0 (no limit) or more")

    def reserve_limit(self) -> int:
        """Jobs at most held ahead of the free slots: ``reserve``; by default sixteen times
        ``concurrency``. The count is only a ceiling: the reserve's real bound is time (what
        this process starts within ``reserve_window`` at its recent pace, worker/reserve.py),
        so a reserved job waits milliseconds, and jobs long enough to be worth another
        worker's slot are never reserved at all. Four times ``concurrency``, the first
        default, left each storage call carrying 20-30 jobs of a no-op drain, and the calls'
        fixed cost showed: a 5,000-job batch on PostgreSQL completed in 0.66-0.72 s against
        0.47-0.55 s at sixteen times (docs/worker.md)."""
        if self.reserve is not None:
            return self.reserve
        return 16 * self.concurrency

    @property
    def queue_names(self) -> tuple[str, ...]:
        """Queue names in the order given."""
        return tuple(q.name for q in self.queues)
