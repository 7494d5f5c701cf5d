"""Wake-ups for waiting calls: one LISTEN connection per storage and process, shared.

``Batch.wait`` and ``JobRef.aresult`` wait to be told that a batch or a job finished: the
``batches_finished`` trigger and the acks ``NOTIFY`` the schema's batch and result channels
(``functions/notify_batch_finished.sql``, ``wake_waiters.sql``) with the batch's or the
job's id. Each wait used to open a connection of its own for its ``LISTEN``, so a web app
awaiting 200 results held 200 backends, twice PostgreSQL's default ``max_connections``, and
from the hundredth on nobody could connect, workers included. Here one connection LISTENs on
both channels, a daemon thread reads it, and each notification wakes the waits registered for
its channel and id.

Order: a wait is registered before the connection is known to listen, and ``watch`` returns
only then, so whatever commits after the caller's next read is seen. A connection that breaks
wakes every registered wait; each opens it again before it returns (a notification may have
gone with the old one, and the caller reads again anyway). The connection is closed once no
call has waited for ``IDLE`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg

from conveyor.storage.aio import Waiter
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.postgres.connection import Settings, after_fork_in_child, translate

__all__ = ["IDLE", "Notices"]

IDLE = 10.0
"""Seconds without a registered wait after which the listening connection is closed."""
_TICK = 0.25  # how often the reading thread looks up from the socket (close, idleness)


class _Wait:
    """One waiting call: a thread's event, or an event loop's."""

    __slots__ = ("aevent", "event", "loop", "lost")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.event = threading.Event()
        self.loop = loop
        self.aevent = asyncio.Event() if loop is not None else None
        self.lost = False

    def wake(self, lost: bool = False) -> None:
        self.lost = self.lost or lost
        self.event.set()
        if self.loop is not None and self.aevent is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                self.loop.call_soon_threadsafe(self.aevent.set)


class Notices:
    """The shared listening connection of one storage in one process, and its waits."""

    def __init__(self, settings: Settings, where: str) -> None:
        self.settings = settings
        self.where = where
        self._channels = (settings.batch_channel, settings.done_channel)
        self._reset()
        self._inherited: list[psycopg.Connection[Any]] = []  # never finalised in a child
        after_fork_in_child(self._after_fork)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._opening = threading.Lock()  # one caller connects at a time, the others wait
        self._waits: dict[tuple[str, str], set[_Wait]] = {}
        self._conn: psycopg.Connection[Any] | None = None

    def _after_fork(self) -> None:
        if self._conn is not None:  # the parent's: finalising it would end the parent's session
            self._inherited.append(self._conn)
        self._reset()

    @contextmanager
    def watch(self, channel: str, key: str) -> Iterator[BatchWaiter]:
        """Wake-ups for ``key`` on ``channel``, for a blocking caller: registered, and the
        connection listening, when this returns."""
        wait = _Wait()
        self._register(channel, key, wait)
        try:
            self._listening()

            def block(timeout: float) -> bool:
                if not wait.event.wait(max(timeout, 0.0)):
                    return False
                wait.event.clear()
                self._relisten(wait)
                return True

            yield BatchWaiter(block, notifies=True)
        finally:
            self._unregister(channel, key, wait)

    @asynccontextmanager
    async def awatch(self, channel: str, key: str) -> AsyncIterator[Waiter]:
        """``watch`` for asyncio code: the event loop never blocks on the connection (it is
        opened in a thread when it is not open yet)."""
        wait = _Wait(asyncio.get_running_loop())
        self._register(channel, key, wait)
        try:
            if self._conn is None:
                await asyncio.to_thread(self._listening)
            aevent = wait.aevent
            assert aevent is not None

            async def block(timeout: float) -> bool:
                try:
                    await asyncio.wait_for(aevent.wait(), max(timeout, 0.001))
                except TimeoutError:
                    return False
                aevent.clear()
                wait.event.clear()
                if wait.lost:
                    await asyncio.to_thread(self._relisten, wait)
                return True

            yield Waiter(block, notifies=True)
        finally:
            self._unregister(channel, key, wait)

    def _register(self, channel: str, key: str, wait: _Wait) -> None:
        with self._lock:
            self._waits.setdefault((channel, key), set()).add(wait)

    def _unregister(self, channel: str, key: str, wait: _Wait) -> None:
        with self._lock:
            waits = self._waits.get((channel, key))
            if waits is not None:
                waits.discard(wait)
                if not waits:
                    del self._waits[(channel, key)]

    def _relisten(self, wait: _Wait) -> None:
        """After a lost connection woke ``wait``: listen again before the caller reads."""
        if wait.lost:
            wait.lost = False
            self._listening()

    def _listening(self) -> None:
        """Make sure the connection is open and listening (opening it if need be)."""
        if self._conn is not None:
            return
        with self._opening:
            if self._conn is not None:
                return
            conn = self._open()
            self._conn = conn
            threading.Thread(target=self._read, args=(conn,), name="conveyor-notices",
                             daemon=True).start()

    def _open(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self.settings.conninfo, autocommit=True,
                                   application_name="conveyor-waits")
        except psycopg.Error as exc:
            raise translate(exc, self.where) from exc
        try:
            for channel in self._channels:
                conn.execute(f'LISTEN "{channel}"')
        except psycopg.Error as exc:
            conn.close()
            raise translate(exc, self.where) from exc
        return conn

    def _read(self, conn: psycopg.Connection[Any]) -> None:
        """The reading thread: dispatch notifications until the connection breaks, the
        storage closes or nobody has waited for ``IDLE`` seconds."""
        idle = 0.0
        broken = False
        try:
            while self._conn is conn:
                for note in conn.notifies(timeout=_TICK):
                    self._dispatch(note.channel, note.payload)
                with self._lock:
                    idle = 0.0 if self._waits else idle + _TICK
                    if idle >= IDLE and self._conn is conn:
                        self._conn = None  # the next watch opens a new one
        except Exception:  # broken, or closed under the reader: redis-py and
            # psycopg raise more than their own errors on a socket closed by another thread
            broken = True
        finally:
            with self._lock:
                if self._conn is conn:
                    self._conn = None
                everyone = [w for waits in self._waits.values() for w in waits]
            with contextlib.suppress(psycopg.Error):
                conn.close()
            if broken:
                for wait in everyone:  # each listens again, then its caller reads
                    wait.wake(lost=True)

    def _dispatch(self, channel: str, key: str) -> None:
        with self._lock:
            waits = list(self._waits.get((channel, key), ()))
        for wait in waits:
            wait.wake()

    def close(self) -> None:
        """Stop listening: the reading thread closes the connection within ``_TICK``
        seconds (a later wait opens a new one)."""
        with self._lock:
            self._conn = None
