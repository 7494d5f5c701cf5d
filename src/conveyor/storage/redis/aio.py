"""Redis's native asyncio enqueue: ``enqueue.lua`` called on a redis.asyncio client (one per
event loop), the same script, arguments and results as the blocking path. Jobs of a batch
or a workflow (whose bookkeeping is a second script in the batch's slot), a Sentinel
deployment (whose failover the blocking client follows) and ``wait_replicas`` go through the
blocking path in a thread (``ThreadedAsync``)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import redis.asyncio as aredis
from redis.asyncio.cluster import ClusterNode, RedisCluster

import redis
from conveyor.core.ids import generated
from conveyor.core.job import EnqueueResult, JobSpec
from conveyor.errors import StorageUnavailable
from conveyor.storage.aio import ThreadedAsync, Waiter, per_loop
from conveyor.storage.redis import codec
from conveyor.storage.redis.connection import (
    CONNECT_TIMEOUT,
    SOCKET_TIMEOUT,
    Link,
    _hiredis_pack,
)
from conveyor.storage.redis.context import RedisContext
from conveyor.storage.redis.enqueue import ENQUEUE_CHUNK, result_of
from conveyor.storage.redis.keys import DoorbellKeys, QueueKeys
from conveyor.storage.redis.scripts import SCRIPTS
from conveyor.storage.redis.waiters import Subscriptions

__all__ = ["RedisAsync"]

AsyncClient = aredis.Redis | RedisCluster
_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
POOL_SIZE = 100  # connections of a loop's client (redis-py's default cap)
_HEADROOM = 4  # connections of the pool left to the result waiters' subscription


class RedisAsync:
    """``aenqueue`` and ``afinished`` on a redis.asyncio client: a part of ``RedisStorage``,
    handing what it cannot do natively to ``threaded`` (the blocking calls in a thread)."""

    def __init__(self, ctx: RedisContext, threaded: ThreadedAsync) -> None:
        self.ctx = ctx
        self.link, self.keys = ctx.link, ctx.keys
        self._threaded = threaded
        # The last caller's loop (weakly) and its client: nearly every call comes from the
        # same loop, and two lookups in weak maps were a tenth of an ``aenqueue``'s own work.
        self._last: tuple[weakref.ref[asyncio.AbstractEventLoop], AsyncClient,
                          AsyncClient] | None = None

    async def aenqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """``enqueue`` for asyncio code: natively, one script call per queue and chunk."""
        settings = self.link.settings
        # A caller-chosen id is checked against the other queues first (``enqueue.taken``).
        if (settings.sentinel or settings.wait_replicas
                or any(s.batch_id or s.node is not None or not generated(s.id)
                       for s in specs)):
            return await self._threaded.aenqueue(specs)
        client = self._aclient(scripts=True)
        out: list[EnqueueResult | None] = [None] * len(specs)
        by_queue: dict[str, list[int]] = {specs[0].queue: [0]} if len(specs) == 1 else {}
        for i, spec in enumerate(specs if len(specs) > 1 else ()):
            by_queue.setdefault(spec.queue, []).append(i)
        try:
            async with self._aslots():
                for queue, idxs in by_queue.items():
                    await self._aenqueue_queue(client, queue, [specs[i] for i in idxs], idxs,
                                               out)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            self._aforget()
            raise StorageUnavailable(f"Redis at {self.link.scrub(self.link.settings.url)} "
                                     f"is unreachable: {self.link.scrub(exc)}") from None
        return [r for r in out if r is not None]

    async def _aenqueue_queue(self, client: AsyncClient, queue: str, specs: list[JobSpec],
                              idxs: list[int], out: list[EnqueueResult | None]) -> None:
        """The jobs of one queue, one script call per chunk; results into ``out[idxs]``."""
        qk = await self._aregister(client, queue)
        if len(specs) == 1 and codec.plain(specs[0]):  # the one-by-one fast path
            code = await _run(client, "enqueue_one", qk,
                              [self.ctx.now_arg(), *codec.enqueue_one_args(specs[0])])
            out[idxs[0]] = result_of(specs[0].id, code)
            await self._aring(client, queue, int(code == "1"))
            return
        for start in range(0, len(idxs), ENQUEUE_CHUNK):
            chunk = range(start, min(start + ENQUEUE_CHUNK, len(idxs)))
            args: list[Any] = [self.ctx.now_arg(), queue, "each"]
            for k in chunk:
                args.extend(codec.enqueue_args(specs[k]))
            reply = await _run(client, "enqueue", qk, args)
            for k, code in zip(chunk, reply, strict=True):
                out[idxs[k]] = result_of(specs[k].id, code)
            await self._aring(client, queue, reply.count("1"))

    async def _aring(self, client: AsyncClient, queue: str, ready: int) -> None:
        """``ring`` on this loop's client: on Cluster, wake workers waiting on ``queue``."""
        if self.link.settings.cluster and ready > 0:
            await _run(client, "ring", DoorbellKeys(self.keys.doorbell(queue)),
                       [self.ctx.now_arg(), ready])

    def _aslots(self) -> asyncio.Semaphore:
        """This loop's cap on calls in flight: one connection each, and redis-py's Cluster
        client fails past its pool's size where it could have waited (``POOL_SIZE``)."""
        found: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = per_loop(self, "_async_slots")
        loop = asyncio.get_running_loop()
        slots = found.get(loop)
        if slots is None:
            slots = found[loop] = asyncio.Semaphore(POOL_SIZE - _HEADROOM)
        return slots

    @asynccontextmanager
    async def afinished(self, job_id: str, queue: str) -> AsyncIterator[Waiter]:
        """Wake-ups when ``job_id`` ends: ack.lua publishes the ids of the queue's waiters
        set that end on the channel of that name, which this subscribes to."""
        if self.link.settings.sentinel:
            async with self._threaded.afinished(job_id, queue) as waiter:
                yield waiter
            return
        client = self._aclient()
        channel = self.keys.queue(queue).waiters
        # before the interest is known: nothing is missed (waiters.py)
        async with self._asubscriptions(client).watch(channel, job_id) as waiter:
            try:
                async with self._aslots():
                    await client.sadd(channel, job_id)
                yield waiter
            finally:
                with contextlib.suppress(*_ERRORS):  # an entry left behind costs a SCARD hit
                    async with self._aslots():
                        await client.srem(channel, job_id)

    async def _aregister(self, client: AsyncClient, queue: str) -> QueueKeys:
        if queue not in self.ctx.registered:
            codec.check_text("queue name", queue)
            await client.sadd(self.keys.queues, queue)
            self.ctx.registered.add(queue)
        return self.keys.queue(queue)

    def _aclient(self, scripts: bool = False) -> AsyncClient:
        """This loop's client; with ``scripts``, the one ``aenqueue``'s calls go through
        (``_make_clients``)."""
        loop = asyncio.get_running_loop()
        last = self._last
        if last is None or last[0]() is not loop:  # another loop than the call before's
            clients = self._aclients()
            pair = clients.get(loop)
            if pair is None:
                pair = clients[loop] = _make_clients(self.link)
            last = self._last = (weakref.ref(loop), *pair)
        return last[2] if scripts else last[1]

    def _aclients(self) -> weakref.WeakKeyDictionary[Any, tuple[AsyncClient, AsyncClient]]:
        return per_loop(self, "_async_clients")

    def _asubscriptions(self, client: AsyncClient) -> Subscriptions:
        """This loop's shared subscription for result waiters, on ``client``."""
        found: weakref.WeakKeyDictionary[Any, Subscriptions] = per_loop(self, "_async_subs")
        loop = asyncio.get_running_loop()
        subs = found.get(loop)
        if subs is None or subs.client is not client:  # a new client after an error
            subs = found[loop] = Subscriptions(client, self.link.scrub(self.link.settings.url))
        return subs

    def _aforget(self) -> None:
        self._last = None
        self._aclients().pop(asyncio.get_running_loop(), None)

    async def aclose(self) -> None:
        """Close this loop's client."""
        loop = asyncio.get_running_loop()
        subs = per_loop(self, "_async_subs").pop(loop, None)
        if subs is not None:
            await subs.aclose()
        self._last = None
        pair = self._aclients().pop(loop, None)
        for client in dict.fromkeys(pair or ()):  # one client on a Cluster and before 3.11
            await client.aclose()


def _make_clients(link: Link) -> tuple[AsyncClient, AsyncClient]:
    """This loop's clients: one for commands, one for ``aenqueue``'s script calls.

    On a single Redis with Python 3.11+ the script calls go through ``_exchange`` on
    connections of their own without a socket timeout of their own, ``_exchange`` bounding
    the whole call by one: redis-py wrapped every send of a connection with one in
    ``asyncio.wait_for`` (a task per call) and every read in a timeout of its own, a fifth of
    an ``aenqueue``'s CPU. Elsewhere both are one client."""
    client = _make_client(link, SOCKET_TIMEOUT)
    if link.settings.cluster or _timeout is None:
        return client, client
    return client, _make_client(link, None)


def _make_client(link: Link, timeout: float | None) -> AsyncClient:
    """A redis.asyncio client with the blocking client's settings (URL, TLS, auth) and the
    socket ``timeout`` of its connections."""
    settings = link.settings
    common: dict[str, Any] = {
        "decode_responses": True, "encoding_errors": "surrogateescape",
        "socket_timeout": timeout, "socket_connect_timeout": CONNECT_TIMEOUT,
    }
    if settings.cluster:
        nodes = [ClusterNode(host, port) for host, port in settings.hosts]
        return RedisCluster(startup_nodes=nodes, **common, **settings.options)
    # Callers wait for a free connection rather than fail (redis-py's pool raises
    # MaxConnectionsError past ``max_connections``): they queue on the loop's semaphore
    # (``_aslots``), which leaves the subscription its connections, so the pool itself never
    # waits. A ``BlockingConnectionPool`` waited on its own condition and timeout at every
    # call besides: a tenth of an ``aenqueue``'s CPU, for a wait that never came.
    return aredis.Redis.from_url(settings.single_url, max_connections=POOL_SIZE, **common)


async def _run(client: AsyncClient, name: str, holder: object, args: list[Any]) -> Any:
    """One call of script ``name`` (EVAL when the server lost its script cache)."""
    script = SCRIPTS[name]
    keys = list(script.key_list(holder))
    if isinstance(client, RedisCluster):  # its client finds the node of the keys' slot
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return await client.eval(script.source, len(keys), *keys, *args)
    try:
        return await _exchange(client, "EVALSHA", script.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        return await _exchange(client, "EVAL", script.source, len(keys), *keys, *args)


async def _exchange(client: aredis.Redis, *command: Any) -> Any:
    """One command and its reply on a connection of ``client``'s pool, within
    ``SOCKET_TIMEOUT`` (``_make_clients``).

    What ``execute_command`` does for a script call, without its layers per call (a retry
    wrapper, a deprecation shim around the pool, events and metrics dispatched): they were
    a third of an ``aenqueue``'s CPU over what a raw ``LPUSH`` pays. The pool still checks a
    connection before handing it out (a closed one is connected again), redis-py closes a
    connection whose send or read failed or was cancelled (the timeout), and a reply that is
    an error is raised. A connection found broken is tried once more on another, as
    redis-py's retry would."""
    if _timeout is None:
        return await _exchange_once(client, command)
    async with _timeout(SOCKET_TIMEOUT):
        return await _exchange_once(client, command)


async def _exchange_once(client: aredis.Redis, command: tuple[Any, ...]) -> Any:
    pool = client.connection_pool
    for attempt in (1, 2):
        conn = await (pool.get_connection() if _BARE_CHECKOUT  # type: ignore[no-untyped-call]
                      else pool.get_connection(command[0]))  # type: ignore[no-untyped-call]
        try:
            await conn.send_packed_command(_wire(conn, command), check_health=False)
            return await conn.read_response()
        except redis.ConnectionError:
            if attempt == 2:
                raise
        finally:
            await pool.release(conn)
    raise AssertionError("unreachable")  # pragma: no cover


def _wire(conn: Any, command: tuple[Any, ...]) -> list[bytes]:
    """``command`` packed by hiredis, as the blocking ``Link`` sends it (a third of the cost
    of redis-py's packing in Python); redis-py packs what hiredis refuses, and names the
    argument it cannot send."""
    if _hiredis_pack is not None:
        with contextlib.suppress(TypeError):
            return [_hiredis_pack(command)]
    packed: list[bytes] = conn.pack_command(*command)
    return packed


# redis-py 5.3+ takes no command name at checkout (and warns when given one); earlier ones
# require it.
_BARE_CHECKOUT = inspect.signature(aredis.ConnectionPool.get_connection).parameters[
    "command_name"].default is not inspect.Parameter.empty
# ``asyncio.timeout`` (Python 3.11+): a deadline over a block, with no task of its own.
_timeout: Callable[[float], AbstractAsyncContextManager[Any]] | None = getattr(
    asyncio, "timeout", None)
