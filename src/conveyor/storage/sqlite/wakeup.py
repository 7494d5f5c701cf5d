"""Low-latency ``wait`` without a server to block on.

Enqueues made by this process notify a ``threading.Condition`` at once; commits made by other
processes are noticed by polling ``PRAGMA data_version`` (it changes when another connection
commits), which costs microseconds and no disk I/O: every ``BRISK_POLL_SECONDS`` within
``BRISK_SECONDS`` of the last work found (a wait woken for it, a dequeue that leased jobs: a
worker that drained a backlog without waiting), every ``POLL_SECONDS`` after. The poll
interval was most of an idle worker's latency for a job from another process (half of it
on average: 2 ms of 2.4, issue 53); polling at 0.5 ms costs ~5 % of a core, at 4 ms ~1 %,
so a worker polls briskly only while work keeps coming.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

from conveyor.storage.sqlite.connection import after_fork_in_child

POLL_SECONDS = 0.004
BRISK_POLL_SECONDS = 0.0005
BRISK_SECONDS = 1.0


def data_version(conn: sqlite3.Connection) -> int:
    """A number that changes whenever another connection commits a change to the file."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


class Wakeup:
    """The in-process half: a generation counter behind a condition variable."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._worked = float("-inf")  # monotonic time work was last found (``worked``)
        after_fork_in_child(self._after_fork)

    def _after_fork(self) -> None:
        # The condition's lock may have been held by another thread at fork time.
        self._cond = threading.Condition()

    def notify(self) -> None:
        """Wake every waiter: new work was committed by this process."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def worked(self) -> None:
        """Work was found just now (a wait woken for it, a dequeue that leased jobs): the
        waits of the next ``BRISK_SECONDS`` poll briskly."""
        self._worked = time.monotonic()

    def interval(self, now: float) -> float:
        """Seconds between two polls of ``data_version`` by a wait at monotonic ``now``."""
        return BRISK_POLL_SECONDS if now - self._worked < BRISK_SECONDS else POLL_SECONDS

    @property
    def generation(self) -> int:
        """How many notifications so far (compared by a later ``wait``)."""
        return self._generation

    def wait(
        self,
        conn: Callable[[], sqlite3.Connection],
        has_work: Callable[[], bool],
        timeout: float,
        seen: tuple[int, int] | None = None,
        last_seen: Callable[[tuple[int, int]], None] | None = None,
    ) -> bool:
        """Block until notified, another connection commits work, or ``timeout`` passes;
        True when woken for work.

        ``seen`` is the (``data_version``, ``generation``) read as this thread's last empty
        dequeue began: a commit or a notification since then is not missed, even one that
        landed before this call. ``last_seen`` is told what a wait that timed out saw last:
        passed as ``seen`` to the next wait, nothing between the two waits is missed either.
        """
        if self._wait(conn, has_work, timeout, seen, last_seen):
            self.worked()
            return True
        return False

    def _wait(
        self,
        conn: Callable[[], sqlite3.Connection],
        has_work: Callable[[], bool],
        timeout: float,
        seen: tuple[int, int] | None,
        last_seen: Callable[[tuple[int, int]], None] | None,
    ) -> bool:
        deadline = time.monotonic() + max(timeout, 0.0)
        db = conn()
        version = data_version(db)
        with self._cond:
            start = self._generation
        if seen is not None and seen != (version, start) and has_work():
            return True
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                if last_seen is not None:
                    last_seen((version, start))
                return False
            with self._cond:
                if self._generation != start:
                    return True
                self._cond.wait(min(self.interval(now), remaining))
                if self._generation != start:
                    return True
            current = data_version(db)
            if current != version:
                version = current
                if has_work():
                    return True
