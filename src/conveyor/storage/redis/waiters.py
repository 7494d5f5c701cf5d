"""Wake-ups for ``await ref.aresult()`` on Redis: one subscription per event loop, shared.

``ack.lua`` publishes the id of a job that ends, if someone waits for it, on its queue's
waiters channel. Each waiting call used to subscribe with a pub/sub connection of its own,
taken from the loop's client pool (redis-py caps it at 100 connections): a hundred concurrent
awaits failed with ``MaxConnectionsError``, enqueues of the same loop with them, and every
waiter received the ids of every other one. Here one ``PubSub`` per loop subscribes to the
channels its waits need, a reader task takes each message and wakes the waits registered for
its channel and id.

Order: a channel's subscription is confirmed before ``watch`` returns, so whatever ends
after the caller's next read is published to it. A connection that breaks wakes every wait;
each subscribes again before its caller reads. The subscription is dropped after ``IDLE``
seconds without a wait (``batch_wait.py`` holds the timings both share).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis
from conveyor.errors import StorageUnavailable
from conveyor.storage.aio import Waiter
from conveyor.storage.redis.batch_wait import CONFIRM, ERRORS, IDLE, TICK

__all__ = ["Subscriptions"]


class _Wait:
    __slots__ = ("event", "lost")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.lost = False


class Subscriptions:
    """The shared subscription of one storage on one event loop, and its waits."""

    def __init__(self, client: Any, where: str) -> None:
        self.client = client
        self._where = where
        self._waits: dict[tuple[str, str], set[_Wait]] = {}
        self._pubsub: Any = None
        # per channel: True once the server confirmed it, False if dropped before that
        self._confirmed: dict[str, asyncio.Future[bool]] = {}
        self._reader: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def watch(self, channel: str, key: str) -> AsyncIterator[Waiter]:
        """Wake-ups for ``key`` on ``channel``: registered, and the channel's subscription
        confirmed, when this returns."""
        wait = _Wait()
        self._waits.setdefault((channel, key), set()).add(wait)
        try:
            await self._subscribed(channel)

            async def block(timeout: float) -> bool:
                try:
                    await asyncio.wait_for(wait.event.wait(), max(timeout, 0.001))
                except TimeoutError:
                    return False
                wait.event.clear()
                if wait.lost:
                    wait.lost = False
                    await self._subscribed(channel)
                return True

            yield Waiter(block, notifies=True)
        finally:
            waits = self._waits.get((channel, key))
            if waits is not None:
                waits.discard(wait)
                if not waits:
                    del self._waits[(channel, key)]

    async def _subscribed(self, channel: str) -> None:
        """Subscribe to ``channel`` if not yet (confirmed by the server), starting the
        reader with the first subscription."""
        confirmed = self._confirmed.get(channel)
        if confirmed is None:
            confirmed = self._confirmed[channel] = asyncio.get_running_loop().create_future()
            try:
                if self._pubsub is None:
                    # a Cluster client learns the slots here if no call did yet: its
                    # pub/sub connection is chosen by them
                    await self.client.initialize()
                if self._pubsub is None:
                    self._pubsub = self.client.pubsub()
                pubsub = self._pubsub
                await pubsub.subscribe(channel)
            except (*ERRORS, redis.RedisError) as exc:
                pubsub = self._pubsub
                if self._reader is None and pubsub is not None:  # nobody else will close it
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()
                self._drop(pubsub)
                raise self._unreachable(exc) from None
            if self._reader is None:
                self._reader = asyncio.create_task(self._read(pubsub))
        try:
            ok = await asyncio.wait_for(asyncio.shield(confirmed), CONFIRM)
        except TimeoutError:
            self._drop(self._pubsub)
            raise self._unreachable(f"no confirmation of SUBSCRIBE within {CONFIRM} s") from None
        if not ok:
            raise self._unreachable("the subscription's connection was lost")

    async def _read(self, pubsub: Any) -> None:
        """The reader: dispatch messages until the connection breaks or nobody has waited
        for ``IDLE`` seconds."""
        idle = 0.0
        broken = False
        try:
            while self._pubsub is pubsub and idle < IDLE:
                note = await pubsub.get_message(timeout=TICK)
                if note is None:
                    idle = 0.0 if self._waits else idle + TICK
                    continue
                channel = note.get("channel")
                if note.get("type") == "subscribe":
                    confirmed = self._confirmed.get(channel)
                    if confirmed is not None and not confirmed.done():
                        confirmed.set_result(True)
                elif note.get("type") == "message":
                    for wait in list(self._waits.get((channel, note.get("data")), ())):
                        wait.event.set()
        except Exception:  # broken, or closed under the reader: redis-py and
            # psycopg raise more than their own errors on a socket closed by another thread
            broken = True
        finally:
            if self._pubsub is pubsub:
                self._drop(pubsub)
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            if broken:
                for waits in list(self._waits.values()):
                    for wait in waits:  # each subscribes again, then its caller reads
                        wait.lost = True
                        wait.event.set()

    def _drop(self, pubsub: Any) -> None:
        """Forget ``pubsub`` (the next wait subscribes on a new one)."""
        if self._pubsub is pubsub:
            self._pubsub = None
            self._reader = None
            for confirmed in self._confirmed.values():
                if not confirmed.done():
                    confirmed.set_result(False)
            self._confirmed = {}

    def _unreachable(self, why: object) -> StorageUnavailable:
        return StorageUnavailable(f"Redis at {self._where} is unreachable: {why}")

    async def aclose(self) -> None:
        """Drop the subscription (its reader closes it)."""
        pubsub = self._pubsub
        reader = self._reader
        self._drop(pubsub)
        if reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await reader
