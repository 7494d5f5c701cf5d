"""Recoverer: puts active jobs whose lease expired (a dead worker's jobs) back to pending."""

from __future__ import annotations

import logging

from conveyor.worker.component import PeriodicComponent

__all__ = ["Recoverer"]

log = logging.getLogger("conveyor.worker")


class Recoverer(PeriodicComponent):
    """Calls ``Storage.reclaim_expired`` about every second [asynq recoverer].

    With the default 10 s lease a ``kill -9``'d worker's jobs run again within ~11 s. The
    storage compares leases with its own clock, counts a recovery apart from error attempts,
    and sends a job recovered more than ``max_recoveries`` times to dead (a poison pill that
    keeps crashing its worker).
    """

    name = "recoverer"
    page = 1000

    def tick(self) -> None:
        """Reclaim every expired lease, a page at a time."""
        total = 0
        while True:
            n = self.storage.reclaim_expired(self.config.max_recoveries, self.page)
            total += n
            if n < self.page or self._stopping.is_set():
                break
        if total:
            log.warning("recovered %d job(s) whose worker stopped heartbeating", total)

    def interval(self) -> float:
        """``config.recover_interval``."""
        return self.config.recover_interval
