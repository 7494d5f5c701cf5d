"""Watchdog: ends thread jobs past their timeout, and writes long jobs' messages live.

Job messages normally travel with the final ``Ack``; a job that runs for minutes would show
nothing until it ends, so every ``config.log_flush_interval`` (~1 s) the messages and progress
of running jobs are written with ``Storage.log`` for the UI to show.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from conveyor.core.clock import Clock
from conveyor.core.job import Ack
from conveyor.storage.base import Storage
from conveyor.worker.component import PeriodicComponent
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executors import ThreadExecutor
from conveyor.worker.inflight import Entry, InFlight

__all__ = ["Watchdog"]

log = logging.getLogger("conveyor.worker")


class Watchdog(PeriodicComponent):
    """Ticks four times a second; cheap when nothing is overdue or chatty."""

    name = "watchdog"

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        config: WorkerConfig,
        *,
        inflight: InFlight,
        threads: ThreadExecutor,
        timed_out: Callable[[Entry], Ack],
        finish: Callable[[Entry, Ack], None],
    ) -> None:
        super().__init__(storage, clock, config)
        self.inflight = inflight
        self.threads = threads
        self.timed_out = timed_out
        self.finish = finish

    def tick(self) -> None:
        """Reap overdue thread jobs, then flush live messages."""
        now = self.clock.now()
        for entry in self.threads.reap(now):
            self.finish(entry, self.timed_out(entry))
        for entry in self.inflight:
            if now - entry.logged_at >= self.config.log_flush_interval:
                entry.logged_at = now
                self.flush_log(entry)

    def flush_log(self, entry: Entry) -> None:
        """Write one running job's buffered messages and progress."""
        events, progress = entry.ctx.drain()
        if not events and progress is None:
            return
        try:
            if not self.storage.log(entry.job.id, entry.job.token, events, progress):
                entry.lost = True
        except Exception:
            log.exception("writing live messages of job %s failed", entry.job.id)

    def interval(self) -> float:
        """A quarter second: thread timeouts are enforced to about that precision."""
        return 0.25
