"""Redis's native asyncio enqueue: ``enqueue.lua`` called on a redis.asyncio client (one per
event loop), the same script, arguments and results as the blocking path. Jobs of a batch
or a workflow (whose bookkeeping is a second script in the batch's slot), a Sentinel
deployment (whose failover the blocking client follows) and ``wait_replicas`` go through the
blocking path in a thread (``ThreadedAsync``)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aredis
from redis.asyncio.cluster import ClusterNode, RedisCluster

import redis
from conveyor.errors import StorageUnavailable
from conveyor.job import EnqueueResult, JobSpec
from conveyor.storage.aio import Waiter
from conveyor.storage.redis import codec
from conveyor.storage.redis.batches import ENQUEUE_CHUNK, result_of
from conveyor.storage.redis.connection import CONNECT_TIMEOUT, SOCKET_TIMEOUT, Link
from conveyor.storage.redis.keys import DoorbellKeys, Keys, QueueKeys
from conveyor.storage.redis.scripts import SCRIPTS

__all__ = ["RedisAsync"]

AsyncClient = aredis.Redis | RedisCluster


class RedisAsync:
    """``aenqueue`` on a redis.asyncio client; a mixin of ``RedisStorage``."""

    link: Link
    keys: Keys
    _queues: set[str]
    now_arg: Callable[[], str]
    enqueue: Callable[[Sequence[JobSpec]], list[EnqueueResult]]

    async def aenqueue(self, specs: Sequence[JobSpec]) -> list[EnqueueResult]:
        """``enqueue`` for asyncio code: natively, one script call per queue and chunk."""
        settings = self.link.settings
        if (settings.sentinel or settings.wait_replicas
                or any(s.batch_id or s.node is not None for s in specs)):
            return await asyncio.to_thread(self.enqueue, specs)
        client = self._aclient()
        out: list[EnqueueResult | None] = [None] * len(specs)
        by_queue: dict[str, list[int]] = {}
        for i, spec in enumerate(specs):
            by_queue.setdefault(spec.queue, []).append(i)
        try:
            for queue, idxs in by_queue.items():
                qk = await self._aregister(client, queue)
                for start in range(0, len(idxs), ENQUEUE_CHUNK):
                    chunk = idxs[start:start + ENQUEUE_CHUNK]
                    args: list[Any] = [self.now_arg(), queue, "each"]
                    for i in chunk:
                        args.extend(codec.enqueue_args(specs[i]))
                    reply = await _run(client, "enqueue", qk, args)
                    for i, code in zip(chunk, reply, strict=True):
                        out[i] = result_of(specs[i].id, code)
                    ready = reply.count("1")
                    if settings.cluster and ready:
                        await _run(client, "ring", DoorbellKeys(self.keys.doorbell(queue)),
                                   [self.now_arg(), ready])
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            self._aforget()
            raise StorageUnavailable(f"Redis at {self.link.scrub(self.link.settings.url)} "
                                     f"is unreachable: {self.link.scrub(exc)}") from None
        return [r for r in out if r is not None]

    @asynccontextmanager
    async def afinished(self, job_id: str, queue: str) -> AsyncIterator[Waiter]:
        """Wake-ups when ``job_id`` ends: ack.lua publishes the ids of the queue's waiters
        set that end on the channel of that name, which this subscribes to."""
        if self.link.settings.sentinel:
            async with super().afinished(job_id, queue) as waiter:  # type: ignore[misc]
                yield waiter
            return
        client = self._aclient()
        channel = self.keys.queue(queue).waiters
        pubsub = client.pubsub()
        await pubsub.subscribe(channel)  # before the interest is known: nothing is missed

        async def wait(timeout: float) -> bool:
            deadline = asyncio.get_running_loop().time() + timeout
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                note = await pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
                if note is not None and note.get("data") == job_id:
                    return True
            return False

        try:
            await client.sadd(channel, job_id)
            yield Waiter(wait, notifies=True)
        finally:
            await client.srem(channel, job_id)
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _aregister(self, client: AsyncClient, queue: str) -> QueueKeys:
        if queue not in self._queues:
            codec.check_text("queue name", queue)
            await client.sadd(self.keys.queues, queue)
            self._queues.add(queue)
        return self.keys.queue(queue)

    def _aclient(self) -> AsyncClient:
        loop = asyncio.get_running_loop()
        clients = self._aclients()
        client = clients.get(loop)
        if client is None:
            client = clients[loop] = _make_client(self.link)
        return client

    def _aclients(self) -> weakref.WeakKeyDictionary[Any, AsyncClient]:
        found = getattr(self, "_async_clients", None)
        if found is None:
            found = weakref.WeakKeyDictionary()
            self._async_clients = found
        return found

    def _aforget(self) -> None:
        self._aclients().pop(asyncio.get_running_loop(), None)

    async def aclose(self) -> None:
        """Close this loop's client."""
        client = self._aclients().pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def _make_client(link: Link) -> AsyncClient:
    """A redis.asyncio client with the blocking client's settings (URL, TLS, auth)."""
    settings = link.settings
    common: dict[str, Any] = {
        "decode_responses": True, "encoding_errors": "surrogateescape",
        "socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": CONNECT_TIMEOUT,
    }
    if settings.cluster:
        nodes = [ClusterNode(host, port) for host, port in settings.hosts]
        return RedisCluster(startup_nodes=nodes, **common, **settings.options)
    return aredis.Redis.from_url(settings.single_url, **common)


async def _run(client: AsyncClient, name: str, holder: object, args: list[Any]) -> Any:
    """One call of script ``name`` (EVAL when the server lost its script cache)."""
    script = SCRIPTS[name]
    keys = list(script.key_list(holder))
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        return await client.eval(script.source, len(keys), *keys, *args)
