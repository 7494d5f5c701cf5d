"""A real worker in this process, driven tick by tick under a fake clock.

The jobs' bodies follow a *plan* (one step per attempt: ``ok``, ``log``, ``fail``, ``raise`` or
``hold``). A ``hold`` step parks the body at a gate until the test releases it with the step
to finish with, so a job can be running while operators act, time passes or its worker dies.
Only the pool threads and the asyncio loop run on their own; every other component is ticked
by the test, so sleeps, leases and timeouts are simulated, never waited for.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from conveyor import Aggregate, Conveyor, Fail, FakeClock, Member
from conveyor.client.context import current_job
from conveyor.core.job import Ack, LeasedJob
from conveyor.storage import Backend
from conveyor.storage.outbox import StartReply
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.inflight import Entry
from conveyor.worker.launcher import Launcher
from tests.model.durable_promise import DURABLE, EVENT, FLAKY, SLEEP, WAIT
from tests.model.promise import BOOM, DECLINED, RETRY_IN

QUEUES = ("a", "b")
CONCURRENCY = 3
LEASE = 10.0
SYNC_TIMEOUT = 5.0  # the ``sync`` job's timeout; ``async`` has none (asyncio waits real time)
MAX_RETRIES = 2
SOLO = "solo"  # ``sync`` run through an aggregator, in groups of one
NEW_JOB = "newjob"  # a job only the "new code" knows: old workers meet it in a rolling deploy
SETTLE_SECONDS = 20.0  # real time a pool thread may take to reach its gate under CPU load


@dataclass
class Gate:
    """Where a ``hold`` step waits; ``then`` is the step it finishes with."""

    event: threading.Event = field(default_factory=threading.Event)
    then: str = "ok"


class Bodies:
    """The jobs' bodies and what they are doing, shared by every worker of one example."""

    def __init__(self) -> None:
        self.gates: dict[tuple[str, int], Gate] = {}
        self.parked: set[tuple[str, int]] = set()  # bodies waiting at their gate now
        self.exits: Counter[str] = Counter()  # bodies that returned or raised, per worker
        self.ran: Counter[tuple[str, int]] = Counter()  # durable steps run: (job id, index)
        self.waited: dict[tuple[str, int], Any] = {}  # what a durable wait returned
        self._lock = threading.Lock()

    def gate(self, key: tuple[str, int]) -> Gate:
        """The gate of one attempt (made on first use)."""
        with self._lock:
            return self.gates.setdefault(key, Gate())

    def waiting(self, key: tuple[str, int]) -> bool:
        """True while that attempt's body is parked at its gate and not yet let go."""
        gate = self.gates.get(key)
        return key in self.parked and gate is not None and not gate.event.is_set()

    def release(self, key: tuple[str, int], then: str) -> None:
        """Let a parked body go on with ``then``."""
        gate = self.gate(key)
        gate.then = then
        gate.event.set()

    def release_all(self) -> None:
        """Let every body go (teardown): they raise."""
        with self._lock:
            gates = list(self.gates.values())
        for gate in gates:
            if not gate.event.is_set():
                gate.then = "raise"
                gate.event.set()

    def _finish(self, step: str) -> str:
        ctx = current_job()
        if step == "log":
            ctx.log("note")
            ctx.progress(1, 1)
        elif step == "fail":
            raise Fail(DECLINED)
        elif step == "raise":
            raise RuntimeError(BOOM)
        return "done"

    @contextmanager
    def _attempt(self, plan: Sequence[str]) -> Iterator[tuple[str, Gate | None]]:
        """This attempt's step and, for a ``hold``, its gate (parked while inside); counts
        the body's exit however it ends."""
        ctx = current_job()
        key = (ctx.job_id, ctx.attempt)
        step = plan[min(ctx.attempt, len(plan)) - 1]
        gate = self.gate(key) if step == "hold" else None
        if gate is not None:
            self.parked.add(key)
        try:
            yield step, gate
        finally:
            self.parked.discard(key)
            with self._lock:
                self.exits[ctx.worker_id] += 1

    def run_sync(self, plan: Sequence[str]) -> str:
        """The ``sync`` job."""
        with self._attempt(plan) as (step, gate):
            if gate is not None:
                gate.event.wait(120)
                step = gate.then
            return self._finish(step)

    def run_durable(self, plan: Sequence[str]) -> str:
        """The ``durable`` job: its actions from the top (tests/model/durable_promise.py)."""
        with self._attempt(["ok"]):
            ctx = current_job()
            for index, action in enumerate(plan):
                if action in ("step", "flaky"):
                    ctx.step(f"s{index}", self._durable_step, ctx.job_id, index, action)
                elif action == "sleep":
                    ctx.sleep(SLEEP, name=f"z{index}")
                else:
                    self.waited[(ctx.job_id, index)] = ctx.wait_for(
                        EVENT, key=ctx.job_id, timeout=WAIT, name=f"w{index}")
            return "done"

    def _durable_step(self, job_id: str, index: int, action: str) -> int:
        with self._lock:
            self.ran[(job_id, index)] += 1
            first = self.ran[(job_id, index)] == 1
        if action == "flaky" and first:
            raise RuntimeError(FLAKY)
        return index

    async def run_async(self, plan: Sequence[str]) -> str:
        """The ``async`` job: a hold polls its gate, so a cancel reaches it at an ``await``."""
        with self._attempt(plan) as (step, gate):
            if gate is not None:
                deadline = time.monotonic() + 120
                while not gate.event.is_set() and time.monotonic() < deadline:
                    await asyncio.sleep(0.002)
                step = gate.then
            return self._finish(step)


def _retry_in(attempt: int, exc: BaseException) -> float:
    return RETRY_IN


def register(app: Conveyor, bodies: Bodies, *, new_code: bool) -> Conveyor:
    """Register the model's jobs on ``app`` (``newjob`` only in the new code). ``solo`` is
    ``sync`` as an aggregated job whose groups hold one member: each run goes through the
    gather, the aggregator and the members' acks (worker/aggregation.py), and must keep every
    promise a plain job keeps."""
    app.job(name="sync", retry=MAX_RETRIES, timeout=SYNC_TIMEOUT, retry_in=_retry_in)(
        bodies.run_sync)
    solo = app.job(name=SOLO, retry=MAX_RETRIES, timeout=SYNC_TIMEOUT, retry_in=_retry_in,
                   aggregate=Aggregate(grace=1.0, max_size=1))(bodies.run_sync)

    @app.aggregate(solo)
    def run_solo(members: list[Member]) -> str:
        [member] = members
        return bodies.run_sync(*member.args, **member.kwargs)

    app.job(name="async", retry=MAX_RETRIES, retry_in=_retry_in)(bodies.run_async)
    app.job(name=DURABLE, retry=MAX_RETRIES, retry_in=_retry_in)(bodies.run_durable)
    if new_code:
        app.job(name=NEW_JOB, retry=MAX_RETRIES, retry_in=_retry_in)(bodies.run_sync)
    return app


class Recording:
    """The storage as the fetcher sees it, recording every lease it hands out."""

    def __init__(self, storage: Backend) -> None:
        self._storage = storage
        self.leased: list[LeasedJob] = []

    def dequeue(self, *args: Any, **kwargs: Any) -> list[LeasedJob]:
        """``Storage.dequeue``, recorded."""
        jobs: list[LeasedJob] = self._storage.dequeue(*args, **kwargs)
        self.leased += jobs
        return jobs

    def start(self, *args: Any, **kwargs: Any) -> list[StartReply]:
        """``Outbox.start`` (a broker's deliveries), its started jobs recorded."""
        replies: list[StartReply] = self._storage.start(*args, **kwargs)  # type: ignore[attr-defined]
        self.leased += [r.job for r in replies if r.job is not None]
        return replies

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


class ModelLauncher(Launcher):
    """A ``Launcher`` that counts the outcomes handed to it, so the test knows when every
    body that ended has been through ``finish`` (claimed, and its ack queued)."""

    def __init__(self, app: Conveyor, config: WorkerConfig, clock: FakeClock) -> None:
        super().__init__(app, config, clock)
        self.finished = 0
        self._count = threading.Lock()

    def finish(self, entry: Entry, ack: Ack) -> None:
        """``Launcher.finish``, counted when a body's own thread or task hands it over (the
        watchdog and the hard shutdown call it too)."""
        try:
            super().finish(entry, ack)
        finally:
            if threading.current_thread().name.startswith(("conveyor-job", "conveyor-asyncio")):
                with self._count:
                    self.finished += 1


class Worker:
    """One worker process of the model: a launcher whose components the test ticks."""

    def __init__(self, app: Conveyor, clock: FakeClock, bodies: Bodies, worker_id: str,
                 new_code: bool, concurrency: int = CONCURRENCY) -> None:
        config = WorkerConfig(queues=tuple(QueueWeight(q) for q in QUEUES), strict=True,
                              concurrency=concurrency, lease=LEASE, worker_id=worker_id)
        self.id = worker_id
        self.new_code = new_code
        self.bodies = bodies
        self.launcher = ModelLauncher(app, config, clock)
        self.recording = Recording(app.storage)
        self.launcher.fetcher.storage = self.recording  # type: ignore[assignment]
        self.cap = CONCURRENCY
        if self.launcher.feed is not None:  # jobs start from deliveries: record those
            feed = self.launcher.feed
            feed.outbox = self.recording  # type: ignore[assignment]
            take = feed.take
            feed.take = lambda order, free, timeout: take(  # type: ignore[method-assign]
                order, min(free, self.cap), timeout)
        self.launcher.threads.start()
        self.alive = True
        self.quiet = False

    def fetch(self) -> list[LeasedJob]:
        """One fetch; the jobs it leased, once every started body ran or parked."""
        return [job for leased in self.fetch_rounds(self.launcher.inflight.free)
                for job in leased]

    def fetch_rounds(self, want: int) -> list[list[LeasedJob]]:
        """One fetch; the jobs it leased, once every started body ran or parked.

        Without a broker that is one ``dequeue``. With one, the relay publishes what is due
        and the fetcher takes what the broker has delivered so far: deliveries arrive on the
        broker's own time, so it goes on (relay, fetch, settle) until ``want`` jobs were
        leased or ``SETTLE_SECONDS`` passed. One list per fetch: each fetch is dispatched on
        its own (a recovered job is isolated from the suspects running at that moment)."""
        rounds: list[list[LeasedJob]] = []
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            self.recording.leased = []
            if self.launcher.relay is not None:
                self.launcher.relay.tick()
            # A round takes no more than the rest of ``want``: jobs of an earlier round that
            # already ended have freed their slots, which one ``dequeue`` would not see.
            self.cap = want - sum(len(r) for r in rounds)
            self.launcher.fetcher.tick()
            self.settle()
            if self.recording.leased:
                rounds.append(list(self.recording.leased))
            got = sum(len(r) for r in rounds)
            if self.launcher.feed is None or got >= want or time.monotonic() > deadline:
                return rounds
            time.sleep(0.002)

    def settle(self, ending: Collection[tuple[str, int]] = ()) -> None:
        """Wait (real time) until every running job is parked at its gate, every ended
        body's outcome went through ``finish`` and the attempts ``ending`` (cancelled tasks)
        ended; then write the acks."""
        launcher = self.launcher
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            running = [(e.job.id, e.job.attempt) for e in launcher.inflight]
            if (all(self.bodies.waiting(key) and key not in ending for key in running)
                    and self.bodies.exits[self.id] <= launcher.finished):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.id} did not settle: running {running}")
            time.sleep(0.001)
        assert launcher.acker.flush(10.0), "acks could not be written"

    def tick(self, *components: Callable[[], Any]) -> None:
        """Tick components, then settle."""
        for tick in components:
            tick()
        self.settle()

    def running(self) -> set[tuple[str, int]]:
        """(job id, attempt) of each job running here."""
        return {(e.job.id, e.job.attempt) for e in self.launcher.inflight}

    def stop(self) -> None:
        """A graceful stop that does not wait: running jobs are interrupted."""
        self.launcher.stop(0.0)
        self.alive = False

    def kill(self) -> None:
        """The process dies: nothing more is written; its leases will expire. With a broker
        its connections close with it (the OS closes a dead process's sockets), so the
        broker hands its unsettled deliveries to the next consumer at once."""
        self.alive = False
        self.close_broker()

    def close_broker(self) -> None:
        """Close this worker's broker connections (none without a broker)."""
        if self.launcher.feed is not None:
            self.launcher.feed.close()
        if self.launcher.relay is not None:
            self.launcher.relay.broker.close()

    def close(self) -> None:
        """Free the threads (after ``Bodies.release_all``) and the broker connections."""
        self.launcher.threads.stop(0.5)
        self.launcher.loop.stop(0.5)
        self.close_broker()
