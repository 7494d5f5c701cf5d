"""The shape every background component shares: ``tick()``, ``start()``, ``stop(timeout)``.

Tests call ``tick()`` directly under a ``FakeClock``; ``start()`` runs ticks on a daemon
thread at the component's interval [asynq's per-component goroutines].
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod

from conveyor.core.clock import Clock
from conveyor.errors import BrokerUnavailable, StorageUnavailable
from conveyor.storage.base import Storage
from conveyor.worker.config import WorkerConfig

__all__ = ["PeriodicComponent"]

log = logging.getLogger("conveyor.worker")

#: Seconds at least between a failed tick and the next try.
RETRY_AFTER = 0.5


class PeriodicComponent(ABC):
    """A component that calls ``tick()`` every ``interval()`` seconds on its own thread.

    A failing tick is logged and retried at the next interval: a storage outage must not kill
    the thread that would recover from it.
    """

    name = "component"

    def __init__(self, storage: Storage, clock: Clock, config: WorkerConfig) -> None:
        self.storage = storage
        self.clock = clock
        self.config = config
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._outage: type[Exception] | None = None  # the error of the outage going on

    @abstractmethod
    def tick(self) -> None:
        """One iteration of the component's work."""

    @abstractmethod
    def interval(self) -> float:
        """Seconds to wait before the next tick."""

    def start(self) -> None:
        """Run ticks on a daemon thread until ``stop``."""
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=f"conveyor-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to finish its current tick and wait up to ``timeout`` for it."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        """True between ``start`` and ``stop``."""
        return self._thread is not None

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self.safe_tick():
                self.rest(self.interval())
            else:
                # A failing tick is not retried faster than twice a second: a component that
                # ticks often (the relay) would otherwise hammer a server that is down.
                self._stopping.wait(max(self.interval(), RETRY_AFTER))

    def rest(self, seconds: float) -> None:
        """Wait between two ticks: ``seconds``, or less if stopped."""
        self._stopping.wait(seconds)

    def safe_tick(self) -> bool:
        """``tick()``, logging instead of raising; returns False when it failed."""
        try:
            self.tick()
        except (StorageUnavailable, BrokerUnavailable) as exc:
            # An outage: one line when it starts (or changes), none per retry, one at its end.
            if type(exc) is not self._outage:
                log.warning("%s: %s (trying again until it answers)", self.name, exc)
            self._outage = type(exc)
            return False
        except Exception:
            log.exception("%s tick failed; trying again in %.1fs", self.name, self.interval())
            return False
        if self._outage is not None:
            log.info("%s: working again", self.name)
            self._outage = None
        return True
