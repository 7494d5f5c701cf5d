"""Waking idle workers: LISTEN/NOTIFY, with a bounded poll as the fallback.

Every row that becomes pending rings the schema's channel with its queue's name (a trigger,
``functions/notify_pending.sql``), delivered when its transaction commits. A waiting thread keeps
one dedicated connection that LISTENs from its first wait on: notifications that arrive
between two waits are buffered on it, so none is missed; the first wait checks for work once
after LISTEN, for what was committed before.

With ``?listen=0`` (PgBouncer in transaction mode, which cannot keep a LISTEN) or when the
listening connection fails, a waiter polls for pending work instead, backing off from
``POLL_MIN`` to ``POLL_MAX`` seconds: a missed wake-up then delays a job by ``POLL_MAX`` at
most, never forever.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from conveyor.storage.postgres.connection import Settings, connect

POLL_MIN = 0.01
POLL_MAX = 0.5


class Listener:
    """One LISTEN connection per thread (and process), opened on the thread's first wait."""

    def __init__(self, settings: Settings, where: str) -> None:
        self.settings = settings
        self.where = where
        self._local = threading.local()
        self._inherited: list[psycopg.Connection[Any]] = []  # never finalised in a child
        self._all: list[tuple[int, psycopg.Connection[Any]]] = []
        self._lock = threading.Lock()

    def _conn(self) -> tuple[psycopg.Connection[Any], bool]:
        """This thread's listening connection, and whether it is new."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) != os.getpid():
            self._inherited.append(conn)
            conn = None
        if conn is not None and not conn.closed and not conn.broken:
            return conn, False
        conn = connect(self.settings, self.where)
        conn.execute(f'LISTEN "{self.settings.channel}"')
        self._local.conn, self._local.pid = conn, os.getpid()
        with self._lock:
            self._all = [(pid, c) for pid, c in self._all if not c.closed] + [(os.getpid(), conn)]
        return conn, True

    def wait(self, queues: Sequence[str], has_work: Callable[[], bool], timeout: float) -> bool:
        """Block until a job may be ready on ``queues`` or ``timeout`` passes."""
        deadline = time.monotonic() + max(timeout, 0.0)
        if not self.settings.listen:
            return _poll(has_work, deadline)
        try:
            conn, new = self._conn()
            if new and has_work():
                return True
            wanted = set(queues)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                for note in conn.notifies(timeout=min(remaining, POLL_MAX * 10)):
                    if note.payload in wanted:
                        return True
        except psycopg.Error:
            self.close_thread()
            return _poll(has_work, deadline)

    def close_thread(self) -> None:
        """Close this thread's listening connection (it is reopened on the next wait)."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            with contextlib.suppress(psycopg.Error):
                conn.close()


    def close(self) -> None:
        """Close every listening connection this process opened."""
        with self._lock:
            mine = [c for pid, c in self._all if pid == os.getpid()]
            self._all = []
        for conn in mine:
            with contextlib.suppress(psycopg.Error):
                conn.close()


def _poll(has_work: Callable[[], bool], deadline: float) -> bool:
    pause = POLL_MIN
    while True:
        if has_work():
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, POLL_MAX)
