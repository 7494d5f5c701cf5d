"""Janitor: deletes finished jobs, batches and silent workers past the app's retention."""

from __future__ import annotations

import logging

from conveyor.clock import Clock
from conveyor.storage.base import Storage
from conveyor.storage.records import Retention
from conveyor.worker.component import PeriodicComponent
from conveyor.worker.config import WorkerConfig

__all__ = ["Janitor"]

log = logging.getLogger("conveyor.worker")


class Janitor(PeriodicComponent):
    """Calls ``Storage.trim(retention)`` every few minutes (``config.janitor_interval``)."""

    name = "janitor"

    def __init__(
        self, storage: Storage, clock: Clock, config: WorkerConfig,
        retention: Retention | None = None,
    ) -> None:
        super().__init__(storage, clock, config)
        self.retention = retention or Retention()

    def tick(self) -> None:
        """One trim pass."""
        removed = self.storage.trim(self.retention)
        if removed:
            log.info("janitor removed %d finished job(s) past retention", removed)

    def interval(self) -> float:
        """``config.janitor_interval``."""
        return self.config.janitor_interval
