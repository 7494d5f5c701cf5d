"""Launcher: one worker process — starts the components, reacts to signals, shuts down.

Start order: heartbeat, recoverer, poller, cron, janitor, processors (acker, executors,
watchdog, fetcher). Stop runs in reverse with the heartbeat last, so leases stay alive while
in-flight jobs drain [asynq]. Stop = quiet, wait up to ``shutdown_timeout`` for running jobs,
then hard shutdown: every unfinished job is acknowledged ``INTERRUPTED`` (the storage puts it
back to pending with an ``interrupted`` event), so a stop never waits forever and never
loses a job.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from functools import partial
from typing import Protocol

from conveyor import __version__
from conveyor.app import Conveyor
from conveyor.broker import open_broker
from conveyor.client.periodic import CronConfig, CronScheduler, describe_unlistened, unlistened
from conveyor.core.clock import Clock
from conveyor.core.job import Ack
from conveyor.errors import StorageReadOnly
from conveyor.storage import redact, shown_url
from conveyor.storage.outbox import as_outbox
from conveyor.worker.acker import Acker
from conveyor.worker.blob_sweep import sweep
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executors import AsyncExecutor, ThreadExecutor
from conveyor.worker.feed import BrokerFeed
from conveyor.worker.fetcher import Fetcher
from conveyor.worker.heartbeat import Heartbeater
from conveyor.worker.inflight import Entry, InFlight
from conveyor.worker.janitor import Janitor
from conveyor.worker.job_processes import JobProcesses
from conveyor.worker.logs import reopen_logs
from conveyor.worker.poller import Poller
from conveyor.worker.processor import Processor
from conveyor.worker.recoverer import Recoverer
from conveyor.worker.recycling import RECYCLE_EXIT, Recycling
from conveyor.worker.relay import Relay
from conveyor.worker.reserve import Reserve
from conveyor.worker.signals import SignalPipe, log_stacks
from conveyor.worker.watchdog import Watchdog

__all__ = ["Launcher"]

log = logging.getLogger("conveyor.worker")

_QUIET = {signal.SIGTSTP, signal.SIGUSR1}
_STOP = {signal.SIGTERM, signal.SIGINT}
# A terminal's Ctrl-C reaches every process of the group, and a supervisor forwards it too: a
# child sees INT twice within milliseconds. Only a stop signal later than this counts as the
# operator's second TERM/INT that asks for a hard shutdown now.
_SECOND_STOP_AFTER = 0.5


class _Component(Protocol):
    def start(self) -> None: ...
    def stop(self, timeout: float = ...) -> None: ...


class Launcher:
    """Builds and runs every component of one worker process for ``app``."""

    def __init__(self, app: Conveyor, config: WorkerConfig, clock: Clock | None = None, *,
                 recycle: bool = False) -> None:
        self.app = app
        self.config = config
        self.clock = clock or app.clock
        storage = self.storage = app.storage
        self.inflight = InFlight(config.concurrency)
        self.reserve = Reserve(config.reserve_limit(), config.reserve_window)
        self.processor = Processor(app, config.worker_id, self.clock, config.executor)
        self.acker = Acker(storage, self.clock, config)
        limits = {"jobs": config.max_jobs_per_child, "memory": config.max_memory_per_child}
        self.processes = JobProcesses(self.processor, self.clock, {
            "app": config.app, "worker": config.worker_id, "limits": limits}, app)
        # Recycling (worker/recycling.py): ``recycle`` says a supervisor replaces this process
        # when it retires; without one it is never retired (nothing would start another).
        self.recycle = recycle
        self.recycling = Recycling(config.max_jobs_per_child, config.max_memory_per_child,
                                   self.retire)
        self.retiring = False
        self.threads = ThreadExecutor(config.concurrency, self.processor, self.finish,
                                      self.processes)
        self.loop = AsyncExecutor(self.processor, self.finish)
        self.heartbeat = Heartbeater(storage, self.clock, config, inflight=self.inflight,
                                     acker=self.acker, reserve=self.reserve,
                                     on_command=self.command)
        self.recoverer = Recoverer(storage, self.clock, config)
        self.poller = Poller(storage, self.clock, config)
        collect = partial(sweep, app.data, storage.get_job, steps=storage.durable.read)
        self.janitor = Janitor(storage, self.clock, config, retention=app.retention,
                               sweep=collect if app.data.offload is not None else None)
        self.cron = CronScheduler(storage, self.clock, CronConfig(), app.schedules.declared,
                                  jobs=app.registry.options, by=f"worker {config.worker_id}")
        self.watchdog = Watchdog(storage, self.clock, config, inflight=self.inflight,
                                 threads=self.threads, timed_out=self.processor.timed_out,
                                 finish=self.finish)
        # With a broker (docs/internals/broker.md) jobs come from its deliveries through the feed, a
        # relay publishes what the store has due, and the acker settles deliveries it wrote.
        self.feed: BrokerFeed | None = None
        self.relay: Relay | None = None
        if app.broker_url:
            self.feed = BrokerFeed(open_broker(app.broker_url), as_outbox(storage), config)
            self.relay = Relay(storage, self.clock, config, broker=open_broker(app.broker_url),
                               pace=lambda: self.reserve.pace)
            self.acker.on_written = self.feed.settle
        self.fetcher = Fetcher(storage, self.clock, config, processor=self.processor,
                               inflight=self.inflight, acker=self.acker, threads=self.threads,
                               loop=self.loop, feed=self.feed, reserve=self.reserve)
        self.signals: SignalPipe | None = None
        self._stop = threading.Event()
        self._started = False

    # -- the per-job hand-off -------------------------------------------------------------
    def finish(self, entry: Entry, ack: Ack) -> None:
        """Record a job's outcome unless someone else (timeout, shutdown) already did, and
        start the next reserved job in the slot it freed (``Fetcher.start_reserved``).

        The fetcher is woken only when the slot stays free, or when the job was the suspect
        it may be waiting on (``Isolation.wait``): it fetches for free slots only, so waking
        it for a slot a reserved job took cost every short job a thread switch for nothing
        (the largest single cost of a drain of async jobs after the loop's crossings)."""
        if self.inflight.claim(entry, wake=False):
            if not entry.lost:
                self.acker.add(ack)
                if ack.resume_at is not None:  # a durable job suspended: promote it on time
                    self.poller.expect(ack.resume_at)
            # Counted before the freed slot takes the next job: a limit reached here stops
            # that start (``retire``), so a process runs its N jobs, not N and what the
            # reserve held while the main thread got round to stopping.
            if entry.executor != "process":  # a job process counts its own jobs
                self.recycling.job_ended()
            self.fetcher.start_reserved()
            if self.inflight.free > 0 or entry is self.fetcher.isolation.suspect:
                self.inflight.wake()

    def retire(self, reason: str) -> None:
        """Replace this process (a recycling limit, ``reason``): stop taking jobs, let the
        running ones end however long they take, exit with ``RECYCLE_EXIT`` for the
        supervisor to start a new one (worker/recycling.py)."""
        if not self.recycle:
            log.warning("not recycled: %s, but no supervisor would start another process "
                        "(--processes 1)", reason)
            return
        self.retiring = True
        self.fetcher.hold()  # no job starts from here on; ``run()`` hands the reserve back
        self.request_stop()

    # -- lifecycle --------------------------------------------------------------------------
    def _components(self) -> list[_Component]:
        relay = [self.relay] if self.relay is not None else []
        return [self.heartbeat, self.recoverer, self.poller, *relay, self.cron, self.janitor,
                self.acker, self.threads, self.watchdog, self.fetcher]

    def start(self) -> None:
        """Log the banner, warn about storage settings, start every component in order."""
        queues = " ".join(f"{q.name},{q.weight}" if q.weight != 1 else q.name
                          for q in self.config.queues)
        broker = f" broker={redact(self.app.broker_url)}" if self.app.broker_url else ""
        log.info("conveyor %s worker %s starting: storage=%s%s queues=%s%s concurrency=%d pid=%d",
                 __version__, self.config.worker_id, shown_url(self.storage.url)[0], broker,
                 queues, " (strict)" if self.config.strict else "", self.config.concurrency,
                 os.getpid())
        self._check_server()
        self.heartbeat.safe_tick()  # registered before the first job is taken
        self._check_periodic_queues()
        for component in self._components():
            component.start()
        self._started = True

    def _check_periodic_queues(self) -> None:
        """Warn (one line) when this app's periodic ticks go to a queue nobody listens to."""
        if not self.app.schedules.declared:
            return
        try:
            listened = {q for w in self.storage.workers() for q in w.queues}
        except Exception:
            log.exception("could not list the workers to check the periodic queues")
            return
        listened.update(self.config.queue_names)
        missing = unlistened(self.app.schedules.declared, listened)
        if missing:
            log.warning("%s", describe_unlistened(missing))

    def _check_server(self) -> None:
        try:
            warnings = self.storage.check_server()
        except StorageReadOnly:
            raise  # no job could ever be taken: stop here, in one line
        except Exception:
            log.exception("could not check the storage server's settings")
            return
        for warning in warnings:
            log.warning("!!! STORAGE SERVER WARNING: %s", warning)

    def quiet(self) -> None:
        """Stop taking new jobs; running ones finish."""
        if not self.fetcher.quieted:
            log.info("quiet: no new jobs will be taken; %d running", len(self.inflight))
        self.fetcher.quiet()
        self.heartbeat.status = "quiet"

    def request_stop(self) -> None:
        """Ask ``run()`` to shut down (from any thread)."""
        self._stop.set()
        if self.signals is not None:
            self.signals.wake()

    def command(self, command: str) -> None:
        """A remote command from the heartbeat reply."""
        if command == "quiet":
            self.quiet()
        elif command == "stop":
            self.request_stop()
        else:
            log.warning("unknown remote command %r ignored", command)

    def run(self) -> int:
        """Run until TERM/INT (or a remote ``stop``, or retiring); returns the exit code: 0,
        or ``RECYCLE_EXIT`` after retiring (every job it took ended or was handed back)."""
        self.signals = SignalPipe().install()
        try:
            self.start()
            while not self._stop.is_set():
                for signum in self.signals.wait(None):
                    if self.on_signal(signum):
                        self.retiring = False  # an operator's stop: the usual timeout
            self.stop(math.inf if self.retiring else self.config.shutdown_timeout)
        finally:
            self.signals.restore()
            self.signals = None
        return RECYCLE_EXIT if self.retiring else 0

    def on_signal(self, signum: int) -> bool:
        """Act on one signal; True when it asks for a stop."""
        if signum in _QUIET:
            self.quiet()
        elif signum in _STOP:
            log.info("received %s: stopping", signal.Signals(signum).name)
            self._stop.set()
            return True
        elif signum == signal.SIGTTIN:
            log_stacks()
        elif signum == signal.SIGUSR2:
            reopen_logs()
        return False

    def stop(self, timeout: float | None = None) -> None:
        """Quiet, wait up to ``timeout`` for running jobs, hard-stop the rest, stop components."""
        timeout = self.config.shutdown_timeout if timeout is None else timeout
        self.quiet()
        self.heartbeat.status = "stopping"
        self.fetcher.stop(5.0)  # no dispatch may race the wait below
        for entry in list(self.inflight):  # a resumable loop hands its job back at once
            entry.ctx.request_stop()
        if not self._wait_for_jobs(timeout):
            self.hard_shutdown()
        self.processes.close()  # after the hard shutdown: killed jobs were put back first
        for component in reversed(self._components()[1:-1]):
            component.stop(5.0)
        if self.feed is not None:  # after the acker's last write: nothing held is settled
            self.feed.close()
        self.loop.stop()
        self.heartbeat.stop()
        self.heartbeat.unregister()
        self._started = False
        log.info("worker %s stopped (%d acks refused)", self.config.worker_id, self.acker.refused)

    def _wait_for_jobs(self, timeout: float) -> bool:
        """True when every running job ended within ``timeout``; a second TERM/INT cuts it."""
        started = time.monotonic()
        deadline = started + timeout
        while len(self.inflight):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.signals is None:
                time.sleep(min(left, 0.05))
                continue
            for signum in self.signals.wait(min(left, 0.1)):
                if signum in _STOP and self.retiring:  # a stop while retiring: a usual one
                    log.info("received %s while retiring: stopping within %gs",
                             signal.Signals(signum).name, self.config.shutdown_timeout)
                    self.retiring = False
                    started = time.monotonic()
                    deadline = started + self.config.shutdown_timeout
                    continue
                if signum in _STOP and time.monotonic() - started >= _SECOND_STOP_AFTER:
                    log.warning("second %s: hard shutdown now", signal.Signals(signum).name)
                    return False
                self.on_signal(signum)
        return True

    def hard_shutdown(self) -> None:
        """Acknowledge every unfinished job INTERRUPTED: back to pending, not an error."""
        entries = list(self.inflight)
        for entry in entries:
            self.finish(entry, self.processor.interrupted(entry))
        if entries:
            log.warning("hard shutdown: %d unfinished job(s) put back to pending: %s",
                        len(entries), ", ".join(e.job.id for e in entries))
