"""Poller: moves scheduled and retrying jobs whose time has come to pending."""

from __future__ import annotations

import random

from conveyor.worker.component import PeriodicComponent

__all__ = ["Poller"]


class Poller(PeriodicComponent):
    """Calls ``Storage.promote_due`` at a randomised interval (0.5 to 1 s by default), so many
    workers started together do not all hit the storage at the same instant [sidekiq poller].

    A tick that promoted a full page goes again at once, so a backlog drains quickly.
    """

    name = "poller"
    page = 1000

    def tick(self) -> None:
        """Promote every due job, a page at a time."""
        while self.storage.promote_due(self.page) >= self.page and not self._stopping.is_set():
            pass

    def interval(self) -> float:
        """A random interval within ``config.poll_interval``."""
        low, high = self.config.poll_interval
        return random.uniform(low, high)
