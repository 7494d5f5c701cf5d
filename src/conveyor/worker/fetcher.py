"""Fetcher: leases jobs for the free slots, in one storage call, and dispatches.

It takes more than the free slots only into the reserve (worker/reserve.py), which holds no
more than this process starts within a few milliseconds at its pace: a job waiting behind a
slow one in this process would be a job another worker could have run. When a fetch comes
back short the next one is ``Storage.wait_dequeue``: it blocks (no busy polling) until new
work may be ready, then leases (in the same round trip where the storage can).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from conveyor.core.clock import Clock
from conveyor.core.job import Ack, LeasedJob, Outcome
from conveyor.errors import BrokerUnavailable, StorageUnavailable
from conveyor.storage.base import Leases, Storage
from conveyor.worker.acker import Acker
from conveyor.worker.config import WorkerConfig, queue_order
from conveyor.worker.executors import AsyncExecutor, ThreadExecutor
from conveyor.worker.feed import BrokerFeed
from conveyor.worker.inflight import Entry, InFlight
from conveyor.worker.isolation import Isolation
from conveyor.worker.processor import Processor
from conveyor.worker.reserve import Reserve, fitting

__all__ = ["Fetcher"]

log = logging.getLogger("conveyor.worker")

# Waits after consecutive failed fetches: short enough that a storage back from an outage is
# used again within ~2 s of answering (a longer cap left workers idle up to 5 s after a
# PostgreSQL restart), long enough not to spin against a storage that is down.
_ERROR_DELAYS = (0.25, 0.5, 1.0, 2.0)


def retry_delay(errors: int) -> float:
    """Seconds to wait after ``errors`` consecutive failed fetches before the next one."""
    return _ERROR_DELAYS[min(errors, len(_ERROR_DELAYS) - 1)]


def log_fetch_failure(exc: BaseException, delay: float) -> None:
    """One line for an outage of the store or the broker (expected, and logged on every retry
    while it lasts); the traceback for anything else, which is a bug to see."""
    if isinstance(exc, (StorageUnavailable, BrokerUnavailable)):
        log.warning("fetching jobs failed: %s; trying again in %.1fs", exc, delay)
    else:
        log.error("fetching jobs failed; trying again in %.1fs", delay, exc_info=exc)


class Fetcher:
    """Fetch → dispatch loop on its own thread; ``tick()`` is one fetch (for tests)."""

    name = "fetcher"

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        config: WorkerConfig,
        *,
        processor: Processor,
        inflight: InFlight,
        acker: Acker,
        threads: ThreadExecutor,
        loop: AsyncExecutor,
        feed: BrokerFeed | None = None,
        reserve: Reserve | None = None,
    ) -> None:
        self._fetch_lock = threading.Lock()  # see ``quiet``
        self._start_lock = threading.Lock()  # starting reserved jobs (any thread); ``quiet``
        self.isolation = Isolation(processor, inflight, acker)
        self.storage = storage
        self.clock = clock
        self.config = config
        self.processor = processor
        self.inflight = inflight
        self.acker = acker
        self.threads = threads
        self.loop = loop
        self.feed = feed  # with a broker, jobs come from its deliveries (worker/feed.py)
        self.reserve = reserve if reserve is not None else Reserve(0, 0.0)
        self._quiet = threading.Event()
        self._thread: threading.Thread | None = None
        self._rng = random.Random()
        self._errors = 0
        self.fetched = 0

    def tick(self, ahead: int = 0) -> int:
        """One fetch of up to ``inflight.free`` jobs, plus ``ahead`` for the reserve; returns
        how many were leased."""
        free = max(0, self.inflight.free)
        if free + ahead <= 0 or self._quiet.is_set():
            return 0
        order = queue_order(self.config.queues, self.config.strict, self._rng)
        with self._fetch_lock:
            if self._quiet.is_set():  # checked under the lock: see ``quiet``
                return 0
            if self.feed is not None:
                jobs = self.feed.take(order, free + ahead, 0.0)
            else:
                jobs = self._carrying(lambda acks: self.storage.dequeue(
                    order, self.config.worker_id, free + ahead, self.config.lease,
                    self.inflight.capacity, acks=acks))
            now = self._split(jobs, free)
        self._dispatch(now)
        return len(jobs)

    def wait_tick(self, ahead: int = 0) -> int:
        """Wait for work, then fetch like ``tick``; returns how many were leased.

        The storage leases right after its wait, outside the fetch lock, so that ``quiet``
        need not wait for a blocked wait: jobs leased after ``quiet`` are handed straight
        back (``interrupted``, which is not an error attempt) instead of started.
        """
        free = max(0, self.inflight.free)
        if free <= 0 or self._quiet.is_set():
            return 0
        order = queue_order(self.config.queues, self.config.strict, self._rng)
        waiting = time.monotonic()
        if self.feed is not None:
            jobs = self.feed.take(order, free + ahead, self.config.idle_wait)
        else:
            # The acks go ahead of the wait; those of jobs ending during it are the
            # acker's to write at once.
            self.acker.carrier(False)
            try:
                jobs = self._carrying(lambda acks: self.storage.wait_dequeue(
                    self.config.queue_names, order, self.config.worker_id, free + ahead,
                    self.config.lease, self.config.idle_wait, self.inflight.capacity,
                    acks=acks))
            finally:
                self.acker.carrier(not self._quiet.is_set())
        self.reserve.waited(time.monotonic() - waiting)  # before these jobs are counted
        with self._fetch_lock:
            if self._quiet.is_set():
                self._hand_back(jobs, "worker quieted before the job started")
                return 0
            now = self._split(jobs, free)
        self._dispatch(now, woken=True)
        return len(jobs)

    def _carrying(self, lease: Callable[[list[Ack]], Leases]) -> Leases:
        """Run ``lease`` with the acker's pending acks (``Storage.dequeue(acks=)``); they go
        back to the acker if it fails."""
        acks = self.acker.take()
        try:
            leases = lease(acks)
        except BaseException:
            self.acker.restore(acks)
            raise
        self.acker.carried(acks, leases.acked)
        return leases

    def _hand_back(self, jobs: list[LeasedJob], why: str) -> None:
        """Put leased jobs that never started back to pending (not an error attempt)."""
        for job in jobs:
            self.acker.add(Ack(job.id, job.token, Outcome.INTERRUPTED, message=why))

    def _split(self, jobs: list[LeasedJob], free: int) -> list[LeasedJob]:
        """The jobs of a fetch to start in the ``free`` slots now; the rest go to the reserve
        (called under the fetch lock, so that ``quiet`` finds them there). A recovered job
        taken from the reserve goes through isolation like any fetched one."""
        fit = fitting(jobs, free)
        if fit < len(jobs):
            self.reserve.put(jobs[fit:])
        return jobs[:fit]

    def ahead(self) -> int:
        """Jobs to lease ahead of the free slots now (``Reserve.wanted``); none while a job
        recovered from a crashed worker runs here: if it crashed this process too, the
        reserve would be recovered with it."""
        return 0 if self.isolation.busy else self.reserve.wanted()

    def take_reserved(self, free: int) -> int:
        """Start up to ``free`` jobs from the reserve (no storage call); returns how many."""
        with self._start_lock:
            if self._quiet.is_set():
                return 0
            jobs = self.reserve.take(free)
            self._dispatch(jobs)
        return len(jobs)

    def start_reserved(self) -> int:
        """Fill the slots free now from the reserve, in the thread whose job just freed one
        (``Launcher.finish``); returns how many started.

        The fetcher tops the reserve up while the slots run, and during that storage call it
        starts nothing: with jobs shorter than the call, every slot that freed meanwhile sat
        idle until it returned (a drain of no-op jobs spent a third of its time so). A job
        recovered from a crashed worker is left to the fetcher, which puts it through
        isolation (a store write, not for a job's thread)."""
        if not len(self.reserve) or self._quiet.is_set():
            return 0
        with self._start_lock:
            if self._quiet.is_set():
                return 0
            jobs = self.reserve.take_plain(max(0, self.inflight.free))
            self._dispatch(jobs)
        return len(jobs)

    def _dispatch(self, jobs: list[LeasedJob], woken: bool = False) -> None:
        """Prepare and start jobs, each in a free slot. ``woken``: the jobs of a wait, whose
        first ``def`` job is on its pool thread before this returns (``ThreadExecutor.hand``:
        an idle worker's latency is the first job's)."""
        self.fetched += len(jobs)
        self.reserve.started(len(jobs))
        if any(job.recoveries for job in jobs):
            ready = self.isolation.take(jobs)
        else:
            ready = [self.processor.prepare(job) for job in jobs]
        for prepared in ready:
            if isinstance(prepared, Ack):
                self.acker.add(prepared)
            elif woken and not prepared.fn.is_async:
                woken = False
                self.inflight.add(prepared)
                self.threads.hand(prepared, self.config.idle_wait)
            else:
                self.dispatch(prepared)

    def dispatch(self, entry: Entry) -> None:
        """Register a prepared job and hand it to the executor that fits it."""
        self.inflight.add(entry)
        self.submit(entry)

    def submit(self, entry: Entry) -> None:
        """Start a registered job on the thread pool or the event loop."""
        if entry.fn.is_async:
            self.loop.submit(entry)
        else:
            self.threads.submit(entry)

    def start(self) -> None:
        """Run the fetch loop on a thread; while it runs, its leases carry the acks."""
        if self._thread is None:
            self.acker.carrier(self.feed is None)
            # never clear ``_quiet`` here: a quiet sent while the worker starts must stand
            self._thread = threading.Thread(target=self._run, name="conveyor-fetcher", daemon=True)
            self._thread.start()

    def quiet(self) -> None:
        """Stop fetching; jobs already running finish normally.

        Once this returns no new job is started: a fetch in flight holds the fetch lock, and
        the next one sees the flag under it; a lease pipelined behind a wait that was already
        sent is handed back unrun (``wait_tick``).
        """
        self._quiet.set()
        self.acker.carrier(False)  # no lease comes to carry them: written at once
        self.inflight.wake()
        with self._fetch_lock, self._start_lock:
            self._hand_back(self.reserve.take_all(), "worker quieted before the job started")

    def hold(self) -> None:
        """Start no more jobs, from any thread and without waiting for a fetch in flight
        (whose jobs still start); ``quiet`` later hands the reserve back."""
        self._quiet.set()
        self.acker.carrier(False)
        self.inflight.wake()

    @property
    def quieted(self) -> bool:
        """True once ``quiet`` was called."""
        return self._quiet.is_set()

    def stop(self, timeout: float = 5.0) -> None:
        """Quiet, then wait for the loop to leave ``Storage.wait_dequeue``."""
        self.quiet()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        # ``drained``: the last fetch got fewer jobs than it asked for, so the queues had no
        # more ready; the next fetch waits for work first (``wait_dequeue``) instead of asking
        # again at once. New work rings the wake-up list whenever it comes, so nothing
        # enqueued in between is missed.
        # With jobs in the reserve a free slot takes one of them first; the reserve is topped
        # up while the slots run (``Reserve.wanted``), never by a blocking wait.
        drained = False
        while not self._quiet.is_set():
            if not self.inflight.wait_for_slot(self.config.idle_wait):
                continue
            self.take_reserved(self.inflight.free)
            free = max(0, self.inflight.free)
            ahead = 0 if drained else self.ahead()
            if free + ahead <= 0:  # every slot busy and the reserve full enough
                continue
            handed_back = self.isolation.handed_back
            try:
                got = self.wait_tick() if drained else self.tick(ahead)
            except Exception as exc:
                delay = retry_delay(self._errors)
                self._errors += 1
                log_fetch_failure(exc, delay)
                self._quiet.wait(delay)
                continue
            self._errors = 0
            drained = got < free + ahead
            if got and self.isolation.handed_back - handed_back == got:
                self.isolation.wait(self.config.idle_wait)
