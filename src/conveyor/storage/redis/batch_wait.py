"""Waiting for a batch on Redis (``Storage.batch_finished``): ``batch.lua`` publishes on the
channel named as the batch's key the moment it marks the batch finished.

Every wait of a storage in a process shares one ``PubSub``, read by a daemon thread that
wakes the waits registered for each channel: a subscription per wait held a connection of
the client's pool each, which redis-py caps at 100, so a hundred threads waiting for batches
failed. A wait's channel is subscribed, and the subscription confirmed, before the caller's
first read, so a finish between that read and the wait is not missed (confirmations are
counted per channel: a SUBSCRIBE sent after an UNSUBSCRIBE of the same channel is confirmed
by its own reply). A connection that breaks wakes every wait, which subscribes again before
its caller reads. The subscription closes after ``IDLE`` seconds without a wait. Through
Sentinel the storage gives a waiter that only sleeps instead (a failover drops a
subscription with the old primary), as ``afinished`` does.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from conveyor.errors import StorageUnavailable
from conveyor.storage.batch_wait import BatchWaiter
from conveyor.storage.redis.connection import Link

__all__ = ["CONFIRM", "ERRORS", "IDLE", "TICK", "BatchSubscriptions"]

IDLE = 10.0
"""Seconds without a wait after which a shared subscription is closed."""
CONFIRM = 5.0
"""Seconds the server has to confirm a SUBSCRIBE."""
TICK = 0.25
"""How often a reader looks up from its connection (closing, idleness)."""
ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
"""What a broken connection raises."""


class _Wait:
    __slots__ = ("event", "lost")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.lost = False

    def wake(self, lost: bool = False) -> None:
        self.lost = self.lost or lost
        self.event.set()


class BatchSubscriptions:
    """The shared subscription of one storage in one process, and its waits."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self._inherited: list[Any] = []  # a parent's, never closed in a child
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._sending = threading.Lock()  # one SUBSCRIBE / UNSUBSCRIBE on the wire at a time
        self._pubsub: Any = None
        self._waits: dict[str, set[_Wait]] = {}
        self._sent: dict[str, int] = {}  # SUBSCRIBEs sent on the current pubsub, per channel
        self._got: dict[str, int] = {}  # and their confirmations

    @contextmanager
    def watch(self, channel: str) -> Iterator[BatchWaiter]:
        """Wake-ups as the batch whose key is ``channel`` finishes: subscribed, and
        confirmed, when this returns."""
        if self._pid != os.getpid():  # forked: the parent's thread is not here
            if self._pubsub is not None:
                self._inherited.append(self._pubsub)
            self._reset()
        wait = _Wait()
        with self._lock:
            self._waits.setdefault(channel, set()).add(wait)
        try:
            self._subscribe(channel)

            def block(timeout: float) -> bool:
                if not wait.event.wait(max(timeout, 0.0)):
                    return False
                wait.event.clear()
                if wait.lost:
                    wait.lost = False
                    self._subscribe(channel)
                return True

            yield BatchWaiter(block, notifies=True)
        finally:
            self._leave(channel, wait)

    def _subscribe(self, channel: str) -> None:
        with self._sending:
            with self._lock:
                if self._pubsub is None:
                    self._pubsub = self._link.client.pubsub()  # type: ignore[no-untyped-call]
                    self._sent, self._got = {}, {}
                    reader = True
                else:
                    reader = False
                pubsub = self._pubsub
                nth = self._sent[channel] = self._sent.get(channel, 0) + 1
            try:
                pubsub.subscribe(channel)
            except ERRORS as exc:
                self._lose(pubsub, close=reader)  # no reader yet: nobody else closes it
                raise StorageUnavailable(self._link.unreachable(exc)) from None
            if reader:  # its connection exists once the first SUBSCRIBE went out
                threading.Thread(target=self._read, args=(pubsub,), daemon=True,
                                 name="conveyor-batch-waits").start()
        with self._changed:
            self._changed.wait_for(
                lambda: self._got.get(channel, 0) >= nth or self._pubsub is not pubsub, CONFIRM)
            confirmed = self._pubsub is pubsub and self._got.get(channel, 0) >= nth
        if not confirmed:
            self._lose(pubsub)
            raise StorageUnavailable(self._link.unreachable(
                redis.TimeoutError(f"no confirmation of SUBSCRIBE within {CONFIRM} s")))

    def _leave(self, channel: str, wait: _Wait) -> None:
        with self._sending:
            with self._lock:
                waits = self._waits.get(channel)
                if waits is not None:
                    waits.discard(wait)
                    if waits:
                        return
                    del self._waits[channel]
                pubsub = self._pubsub
            if pubsub is not None:
                with contextlib.suppress(*ERRORS):  # the reader sees a broken connection
                    pubsub.unsubscribe(channel)

    def _read(self, pubsub: Any) -> None:
        """The reader: wake waits until the connection breaks or nobody has waited for
        ``IDLE`` seconds."""
        idle = 0.0
        broken = False
        try:
            while self._pubsub is pubsub:
                note = pubsub.get_message(timeout=TICK)
                if note is None:
                    with self._lock:
                        idle = 0.0 if self._waits else idle + TICK
                        if idle >= IDLE and self._pubsub is pubsub:
                            self._pubsub = None  # the next wait subscribes on a new one
                    continue
                kind, channel = note.get("type"), note.get("channel")
                with self._changed:
                    if kind == "subscribe":
                        self._got[channel] = self._got.get(channel, 0) + 1
                        self._changed.notify_all()
                    waits = list(self._waits.get(channel, ())) if kind == "message" else []
                for wait in waits:
                    wait.wake()
        except Exception:  # broken, or closed under the reader: redis-py and
            # psycopg raise more than their own errors on a socket closed by another thread
            broken = True
        finally:
            self._lose(pubsub, close=True, wake=broken)

    def _lose(self, pubsub: Any, close: bool = False, wake: bool = False) -> None:
        """Forget ``pubsub`` (the next wait subscribes on a new one); ``wake``: every wait
        is told, and subscribes again before its caller reads."""
        with self._changed:
            if self._pubsub is pubsub:
                self._pubsub = None
            self._changed.notify_all()
            everyone = [w for waits in self._waits.values() for w in waits] if wake else []
        if close:
            with contextlib.suppress(Exception):
                pubsub.close()
        for wait in everyone:
            wait.wake(lost=True)

    def close(self) -> None:
        """Stop: the reader closes the subscription within ``TICK`` seconds."""
        with self._lock:
            if self._pid == os.getpid():
                self._pubsub = None
