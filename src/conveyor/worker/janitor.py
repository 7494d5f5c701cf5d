"""Janitor: deletes finished jobs, batches and silent workers past the app's retention, the
blobs no job references (``conveyor.worker.blob_sweep``, when the app keeps data by reference), and
asks the storage for the upkeep its hot path needs (``Storage.tidy``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from conveyor.core.clock import Clock
from conveyor.storage.base import Storage
from conveyor.storage.retention import Retention
from conveyor.worker.component import PeriodicComponent
from conveyor.worker.config import WorkerConfig

__all__ = ["Janitor"]

log = logging.getLogger("conveyor.worker")


class Janitor(PeriodicComponent):
    """Calls ``Storage.tidy()`` every ``config.tidy_interval`` seconds and
    ``Storage.trim(retention)`` every ``config.janitor_interval`` (first at start), both
    timed by the app's clock."""

    name = "janitor"

    def __init__(
        self, storage: Storage, clock: Clock, config: WorkerConfig,
        retention: Retention | None = None, sweep: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(storage, clock, config)
        self.retention = retention or Retention()
        self.sweep = sweep  # collects unreferenced blobs after each trim pass
        self._trim_at: float | None = None  # the app clock's time of the next trim pass

    def tick(self) -> None:
        """Tidy, and trim when a trim pass is due."""
        now = self.clock.now()
        if self._trim_at is None or now >= self._trim_at:
            self._trim_at = now + self.config.janitor_interval
            removed = self.storage.trim(self.retention)
            if removed:
                log.info("janitor removed %d finished job(s) past retention", removed)
            if self.sweep is not None:
                collected = self.sweep()
                if collected:
                    log.info("janitor deleted %d blob(s) no job references", collected)
        if self.storage.tidy():
            log.debug("storage tidied")

    def interval(self) -> float:
        """``config.tidy_interval``, shorter when a trim pass comes sooner."""
        left = self.config.janitor_interval if self._trim_at is None else (
            self._trim_at - self.clock.now())
        return max(0.0, min(self.config.tidy_interval, left))
