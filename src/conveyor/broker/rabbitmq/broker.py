"""RabbitMQ as conveyor's broker (``amqp://``, ``amqps://``): quorum queues, publisher
confirms, manual acks, connection recovery. docs/brokers.md has the options.

The client is aio-pika (and aiormq beneath it): its robust connection reconnects and
restores consumers by itself, and its confirms are futures, so a publish of a thousand jobs
waits for a thousand confirms at once instead of one round trip each (pika's blocking
connection confirms message by message: ~640 messages/s here). The adapter is synchronous,
like the rest of the worker: the connection lives on an event loop in a thread of its own,
and every method hands its work to that loop and waits for the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aio_pika
from aio_pika.abc import (
    AbstractIncomingMessage,
    AbstractRobustChannel,
    AbstractRobustConnection,
)

from conveyor.broker.base import Delivery
from conveyor.broker.rabbitmq.logs import quiet_client_logs, reason
from conveyor.broker.rabbitmq.packs import (
    REDELIVERED,
    Malformed,
    Pack,
    encode,
    job_ids,
    new_message_id,
)
from conveyor.core.text import printable
from conveyor.errors import BrokerUnavailable, BrokerURLError
from conveyor.storage import redact, without_secrets

__all__ = ["RabbitBroker", "open_rabbitmq"]

T = TypeVar("T")
log = logging.getLogger("conveyor.worker")

# Seconds between reconnect attempts after the connection is lost (aio-pika's default, 5 s,
# left workers idle up to 5 s after the node was back: measured in scenario 25).
_RECONNECT_INTERVAL = 1.0
# conveyor's own URL options; every other query parameter goes to aio-pika as it is.
_OPTIONS = {"prefix": "conveyor", "delivery_limit": "20", "hold": "900", "prefetch": "0",
            "timeout": "10", "pack": "128"}
# A pack carries up to ``pack`` ids, and a publish of n ids makes packs of about n / _SPREAD:
# a few ids go one per message (each to whichever consumer is free), a backlog in few messages.
_SPREAD = 4


def open_rabbitmq(url: str) -> RabbitBroker:
    """Connect to the RabbitMQ ``url`` names (raises ``BrokerUnavailable`` in one line)."""
    return RabbitBroker(url)


def _split(url: str) -> tuple[str, dict[str, str]]:
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # an unclosed "[", a host that is not an address, a bad port
        raise BrokerURLError(f"broker URL {redact(url)!r} is malformed: "
                             f"{without_secrets(str(exc), url)}") from None
    if not host:
        raise BrokerURLError(f"broker URL {redact(url)!r} names no host")
    if port == 0:
        raise BrokerURLError(f"broker URL {redact(url)!r} has a port that is not a number "
                             "from 1 to 65535")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    options = {k: query.pop(k, v) for k, v in _OPTIONS.items()}
    for name in ("delivery_limit", "hold", "prefetch", "timeout", "pack"):
        try:
            float(options[name])
        except ValueError:
            raise BrokerURLError(f"broker URL {redact(url)!r}: {name}={options[name]!r} is "
                                 "not a number") from None
    return urlunsplit(parts._replace(query=urlencode(query))), options


class RabbitBroker:
    """One connection to RabbitMQ: a publishing channel with confirms, one consumer per queue."""

    def __init__(self, url: str) -> None:
        self.url = url
        target, options = _split(url)
        self.prefix = options["prefix"]
        self.delivery_limit = int(float(options["delivery_limit"]))
        self.hold = float(options["hold"])
        self.prefetch = int(float(options["prefetch"]))
        self.pack = max(1, int(float(options["pack"])))
        self._timeout = float(options["timeout"])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="conveyor-amqp")
        self._thread.start()
        self._cond = threading.Condition()
        self._buffers: dict[str, deque[tuple[Pack, str]]] = {}
        # Queues with a consumer: added once RabbitMQ took the subscription, so a subscribe
        # that failed half way (a timeout, a connection closed under it) is made again.
        self._subscribed: set[str] = set()
        self._held: dict[int, Pack] = {}  # packs with a delivery handed out, by id()
        self._per_message: dict[str, float] = {}  # ids per message of the last publish
        self._declared: set[str] = set()
        self._closed = False
        #: Messages settled without a delivery because they carry no job ids (``Malformed``).
        self.malformed = 0
        try:
            # The first connect fails with our one line; the client's own log lines about it
            # (an ERROR and a "reconnecting") would only repeat it, with a traceback's noise.
            with quiet_client_logs():
                self._conn: AbstractRobustConnection = self._call(aio_pika.connect_robust(
                    target, timeout=self._timeout, reconnect_interval=_RECONNECT_INTERVAL),
                    self._timeout + 5)
            self._publisher = self._call(self._channel(confirms=True))
            self._consumer = self._call(self._channel(confirms=False))
        except BaseException:
            self._stop_loop()
            raise

    # -- the loop thread ------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the connection's loop and wait; errors become one line."""
        if not self._loop.is_running() and self._closed:
            coro.close()
            raise BrokerUnavailable(f"RabbitMQ at {redact(self.url)}: connection closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout or self._timeout + 5)
        except (BrokerUnavailable, BrokerURLError):
            raise
        except Exception as exc:
            future.cancel()
            raise BrokerUnavailable(f"RabbitMQ at {redact(self.url)}: {reason(exc)}") from None

    async def _channel(self, confirms: bool) -> AbstractRobustChannel:
        channel = self._conn.channel(publisher_confirms=confirms)
        await channel  # opens it (and reopens it after a reconnect: a robust channel)
        return channel

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():  # closed here, not by the GC in whatever thread
            self._loop.close()

    # -- queues -----------------------------------------------------------------------------

    def name(self, queue: str) -> str:
        """The RabbitMQ queue that carries conveyor queue ``queue``."""
        return f"{self.prefix}.{queue}"

    @property
    def dead_queue(self) -> str:
        """Where messages past the delivery limit go (``dead_lettered`` reads it)."""
        return f"{self.prefix}.dead-lettered"

    async def _declare(self, queue: str) -> None:
        if queue in self._declared:
            return
        await self._publisher.declare_queue(self.dead_queue, durable=True,
                                            arguments={"x-queue-type": "quorum"})
        await self._publisher.declare_queue(self.name(queue), durable=True, arguments={
            "x-queue-type": "quorum", "x-delivery-limit": self.delivery_limit,
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.dead_queue})
        self._declared.add(queue)

    # -- the Broker protocol ------------------------------------------------------------------

    keyed = False  # a queue is one ordered line: no routing by key

    def publish(self, queue: str, job_ids: Sequence[str],
                keys: Sequence[str | None] | None = None, pack: int = 0) -> list[bool]:
        """Persistent messages, all in flight at once; True for each id the broker confirmed.

        Many ids at once go in packs (one message of up to ``pack`` ids, a JSON list, and
        never more than the URL's ``pack``): the per-message cost of AMQP — framing, a
        confirm, a delivery, an ack — is most of what a job costs the worker, and a backlog
        needs no more messages than consumers can share. Every message gets a new id (AMQP
        ``message-id``); see ``Delivery.message_id``.
        """
        if not job_ids:
            return []
        cap = min(self.pack, pack) if pack > 0 else self.pack
        size = min(cap, -(-len(job_ids) // _SPREAD))
        packs = [list(job_ids[i:i + size]) for i in range(0, len(job_ids), size)]
        self._per_message[queue] = len(job_ids) / len(packs)

        async def run() -> list[bool]:
            await self._declare(queue)
            results = await asyncio.gather(
                *(self._send(queue, ids, new_message_id()) for ids in packs),
                return_exceptions=True)
            return [not isinstance(r, BaseException)
                    for r, ids in zip(results, packs, strict=True) for _ in ids]

        return self._call(run(), self._timeout * 2 + 5)

    async def _send(self, queue: str, ids: list[str], message_id: str | None,
                    headers: dict[str, Any] | None = None) -> None:
        body, kind = encode(ids)
        await self._publisher.default_exchange.publish(aio_pika.Message(
            body, content_type=kind, headers=headers, message_id=message_id,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=self.name(queue), timeout=self._timeout)

    def consume(self, queues: Sequence[tuple[str, int]], limit: int,
                timeout: float) -> list[Delivery]:
        """Up to ``limit`` deliveries, queues tried in the order given (the fetcher orders
        them by weight); waits up to ``timeout`` for the first."""
        if limit <= 0 or self._closed:
            return []
        names = [name for name, _ in queues]
        with self._cond:
            missing = [name for name in names if name not in self._subscribed]
        if missing:
            self._call(self._subscribe(missing, self.prefetch or max(16, 2 * limit)))
        self._settle_overdue()
        with self._cond:
            self._cond.wait_for(lambda: any(self._buffers.get(n) for n in names),
                                timeout=timeout)
            out: list[Delivery] = []
            now = time.monotonic()
            for name in names:
                buffer = self._buffers.get(name)
                while buffer and len(out) < limit:
                    pack, job_id = buffer.popleft()
                    if not pack.live():  # its channel died: RabbitMQ delivers it again
                        continue
                    if not pack.handed_at:
                        pack.handed_at = now
                        self._held[id(pack)] = pack
                    out.append(Delivery(queue=name, job_id=job_id, handle=pack,
                                        redelivered=pack.redelivered, attempts=pack.attempts,
                                        message_id=pack.message_id))
            return out

    def buffered(self) -> int:
        """Job ids RabbitMQ has sent this connection that ``consume`` has not handed out."""
        with self._cond:
            return sum(len(b) for b in self._buffers.values())

    async def _subscribe(self, queues: list[str], prefetch: int) -> None:
        # Quorum queues take no channel-wide (global) QoS: the limit is per consumer.
        await self._consumer.set_qos(prefetch_count=prefetch)
        for queue in queues:
            await self._declare(queue)
            declared = await self._consumer.declare_queue(self.name(queue), passive=True)
            await declared.consume(self._arrival(queue))
            with self._cond:
                self._buffers.setdefault(queue, deque())
                self._subscribed.add(queue)

    def _arrival(self, queue: str) -> Callable[[AbstractIncomingMessage], Awaitable[None]]:
        """The consumer callback of one queue: buffer the message for ``consume``."""
        async def arrived(message: AbstractIncomingMessage) -> None:
            try:
                ids = job_ids(message)
            except Malformed as exc:
                await self._drop(queue, message, str(exc))
                return
            if message.redelivered and len(ids) > 1:
                await self._split(queue, message, ids)
                return
            pack = Pack(message, len(ids))
            with self._cond:  # it may come before _subscribe has made the buffer
                self._buffers.setdefault(queue, deque()).extend((pack, job_id) for job_id in ids)
                self._cond.notify_all()

        return arrived

    async def _drop(self, queue: str, message: AbstractIncomingMessage, why: str) -> None:
        """Settle a message that carries no job ids (acked: nothing of it can run, and the
        store's relay publishes again any job a lost message was for), count it, say so."""
        with self._cond:
            self.malformed += 1
        log.warning("dropped a malformed message from RabbitMQ queue %s (message id %s): %s",
                    printable(self.name(queue)), printable(str(message.message_id)[:40]), why)
        with contextlib.suppress(Exception):  # a lost channel: it comes back and is dropped
            await message.ack()

    async def _split(self, queue: str, message: AbstractIncomingMessage,
                     ids: list[str]) -> None:
        """A pack handed back (its consumer died, or gave part of it back) returns as one
        message per job, each marked redelivered: from here on the broker counts deliveries
        per job, so a job that kills its workers reaches the delivery limit alone and the
        others in its pack are not dead-lettered with it. Each keeps the pack's message id:
        the store knows the jobs the pack started by it (``Outbox.start``)."""
        try:
            await asyncio.gather(*(self._send(queue, [job_id], message.message_id,
                                              {REDELIVERED: 1}) for job_id in ids))
        except Exception:  # not all confirmed: the pack goes back as it is, to try again
            with contextlib.suppress(Exception):
                await message.reject(requeue=True)
            return
        with contextlib.suppress(Exception):  # a lost channel: the pack comes back, is split
            await message.ack()

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Settle for good; a delivery of a connection since lost is void (RabbitMQ has
        already handed it back)."""
        self._settle(deliveries, requeue=False)

    def release(self, deliveries: Sequence[Delivery]) -> None:
        """Hand back for redelivery."""
        self._settle(deliveries, requeue=True)

    def _settle(self, deliveries: Sequence[Delivery], requeue: bool) -> None:
        """A message is settled once every job of it is: acked, or handed back whole when any
        of them was (the others, finished, are skipped by the store when it comes back)."""
        done: list[Pack] = []
        with self._cond:
            for delivery in deliveries:
                pack = delivery.handle
                if not isinstance(pack, Pack) or self._held.get(id(pack)) is not pack:
                    continue  # another connection's, or settled already: void
                pack.open -= 1
                pack.requeue = pack.requeue or requeue
                if pack.open <= 0:
                    del self._held[id(pack)]
                    done.append(pack)
        if done and not self._closed:
            self._call(self._finish(done))

    @staticmethod
    async def _finish(packs: list[Pack]) -> None:
        for pack in packs:
            try:
                if pack.requeue:
                    await pack.message.reject(requeue=True)
                else:
                    await pack.message.ack()
            except Exception:  # the channel died: RabbitMQ redelivers it
                pass

    def _settle_overdue(self) -> None:
        """Ack messages held longer than ``hold``: RabbitMQ closes a channel with a delivery
        unacked past its consumer_timeout (30 min by default); the store's lease covers the
        job from here on, as it does without a broker."""
        limit = time.monotonic() - self.hold
        with self._cond:
            overdue = [p for p in self._held.values() if p.handed_at < limit]
            for pack in overdue:
                del self._held[id(pack)]
        if overdue:
            self._call(self._finish(overdue))

    def backlog(self, queue: str) -> int:
        """Job ids ready in the queue (not counting deliveries held by consumers): its ready
        messages times the ids per message of this connection's last publish to it."""
        async def run() -> int:
            await self._declare(queue)
            # The protocol's own passive declare: aio-pika's Queue object keeps the count of
            # its first declaration.
            underlay = await self._publisher.get_underlay_channel()
            declared = await underlay.queue_declare(self.name(queue), passive=True)
            return int(declared.message_count or 0)

        messages = self._call(run())
        return int(messages * self._per_message.get(queue, 1.0) + 0.5)

    def dead_lettered(self, limit: int = 100) -> list[str]:
        """Job ids of messages RabbitMQ dead-lettered past the delivery limit (taken off)."""
        async def run() -> list[str]:
            queue = await self._publisher.declare_queue(
                self.dead_queue, durable=True, arguments={"x-queue-type": "quorum"})
            out: list[str] = []
            while len(out) < limit:
                message = await queue.get(no_ack=True, fail=False)
                if message is None:
                    break
                with contextlib.suppress(Malformed):  # nothing in it to bury
                    out += job_ids(message)
            return out

        return self._call(run())

    def close(self) -> None:
        """Close the connection: RabbitMQ hands every unsettled delivery to another consumer."""
        if self._closed:
            return
        self._closed = True
        self._held.clear()
        try:
            self._call(self._conn.close(), 10)
        except BrokerUnavailable:
            pass
        finally:
            self._stop_loop()
