"""Low-latency ``wait`` without a server to block on.

Enqueues made by this process notify a ``threading.Condition`` at once; commits made by other
processes are noticed by polling ``PRAGMA data_version`` (it changes when another connection
commits) every few milliseconds, which costs microseconds and no disk I/O.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

POLL_SECONDS = 0.004


class Wakeup:
    """The in-process half: a generation counter behind a condition variable."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    def notify(self) -> None:
        """Wake every waiter: new work was committed by this process."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait(
        self,
        conn: Callable[[], sqlite3.Connection],
        has_work: Callable[[], bool],
        timeout: float,
    ) -> bool:
        """Block until notified, another connection commits work, or ``timeout`` passes."""
        deadline = time.monotonic() + max(timeout, 0.0)
        db = conn()
        version = db.execute("PRAGMA data_version").fetchone()[0]
        with self._cond:
            start = self._generation
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._cond:
                if self._generation != start:
                    return True
                self._cond.wait(min(POLL_SECONDS, remaining))
                if self._generation != start:
                    return True
            current = db.execute("PRAGMA data_version").fetchone()[0]
            if current != version:
                version = current
                if has_work():
                    return True
