"""Redis connections from a storage URL (``urls.py`` says what each form means), with
retries and clear errors: a single server, a Redis Cluster, or the primary a set of Sentinels
watch (``sentinel.py``). Passwords never reach a log line or an error message
(``conveyor.storage.redact``).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any, TypeVar

from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import Connection
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    RedisClusterException,
    TryAgainError,
)
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError
from redis.utils import HIREDIS_AVAILABLE

import redis
from conveyor.errors import StorageError, StorageUnavailable, StorageURLError
from conveyor.storage import redact, without_secrets
from conveyor.storage.redis import sentinel
from conveyor.storage.redis.urls import DEFAULT_PREFIX, Settings, parse_url

__all__ = ["DEFAULT_PREFIX", "Link", "ReplicaShortfall", "Settings", "make_client",
           "parse_url", "scrub", "slot_of"]

T = TypeVar("T")

SOCKET_TIMEOUT = 30.0  # longer than any blocking wait() we issue
CONNECT_TIMEOUT = 5.0
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, OSError)
# Replies of a Cluster node that does not (or not yet) serve the slot: MOVED (a subclass of
# ASK's error), ASK, TRYAGAIN, CLUSTERDOWN. redis-py's cluster client knows what to do.
REDIRECTS = (AskError, TryAgainError, ClusterDownError)
# Commands whose first key is their first argument: on Cluster they go straight to the node
# that owns the key's slot. Anything else (TIME, PING, CONFIG...) goes through redis-py.
KEYED = frozenset({
    "BLPOP", "DEL", "EXISTS", "GET", "GETDEL", "HDEL", "HEXISTS", "HGET", "HGETALL", "HLEN",
    "HMGET", "HSCAN", "HSET", "LINDEX", "LLEN", "LPUSH", "LRANGE", "SADD", "SET", "SMEMBERS",
    "UNLINK", "ZADD", "ZCARD", "ZCOUNT", "ZRANGE", "ZRANGEBYSCORE", "ZREM", "ZREVRANGE",
    "ZSCORE",
})

# What redis-py's own hiredis serializer ends in, without its per-argument Python loop (a
# script call has 20-30 arguments: ~10 µs saved per call on a small VM).
_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None = (
    importlib.import_module("hiredis").pack_command if HIREDIS_AVAILABLE else None)


def make_client(settings: Settings) -> redis.Redis | RedisCluster:
    """A redis-py client; the storage does its own retrying, so redis-py's is turned off."""
    common: dict[str, Any] = {
        "decode_responses": True,
        # Bytes that are not UTF-8 (a damaged record) decode to lone surrogates instead of
        # failing the whole reply, and with it every other job it carried; the codec then
        # reports that one record as unreadable.
        "encoding_errors": "surrogateescape",
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": CONNECT_TIMEOUT,
    }
    if settings.sentinel:
        return sentinel.make_sentinel_client(settings, common)
    if settings.cluster:
        nodes = [ClusterNode(host, port)  # type: ignore[no-untyped-call]
                 for host, port in settings.hosts]
        try:
            # the URL's options win over conveyor's defaults (socket_timeout=...)
            return RedisCluster(startup_nodes=nodes, **{**common, **settings.options})
        except (RedisClusterException, redis.RedisError) as exc:
            # The client discovers the cluster as it is built: no node reachable, or a
            # server that is not in cluster mode, fails here rather than at the first call.
            raise StorageUnavailable(f"Redis Cluster at {redact(settings.url.split('?')[0])} "
                                     f"cannot be used: {scrub(settings, exc)}") from None
    return redis.Redis.from_url(
        settings.single_url, retry=Retry(NoBackoff(), 0), **common
    )


class ReplicaShortfall(redis.ConnectionError):
    """Fewer replicas than ``wait_replicas`` confirmed a write within ``wait_timeout``: the
    write is not acknowledged, and is tried again (every script is safe to re-run)."""


def scrub(settings: Settings, exc: BaseException | str) -> str:
    """An error's text with every secret of the URL taken out, should a library echo one."""
    text = exc if isinstance(exc, str) else str(exc) or type(exc).__name__
    return without_secrets(text, settings.url, [
        str(options["password"]) for options in (settings.options, settings.sentinel_options)
        if options.get("password")])


@lru_cache(maxsize=8192)
def slot_of(key: str) -> int:
    """The Cluster hash slot of a key (its ``{tag}`` when it has one)."""
    return key_slot(key.encode("utf-8", "surrogateescape"))


def _pack(conn: Connection, commands: Sequence[Sequence[Any]]) -> list[bytes]:
    """The wire form of ``commands`` (each a single-word command and its arguments)."""
    if _hiredis_pack is None:  # pragma: no cover
        packed: list[bytes] = conn.pack_commands(commands)  # type: ignore[no-untyped-call]
        return packed
    try:
        return [_hiredis_pack(tuple(c)) for c in commands]
    except TypeError as exc:  # as redis-py reports an argument it cannot send
        raise redis.DataError(str(exc)) from None


class Link:
    """Runs commands with retries on transient errors, turning outages into
    ``StorageUnavailable`` with a message that names the server but never the password.

    Commands go straight through idle raw connections kept in free lists (one per concurrent
    caller at most; on Cluster one list per node): a round trip costs a third of a pooled
    ``execute_command``, which is what makes one-by-one enqueue fast. On Cluster a keyed
    command is sent to the primary that owns its slot by redis-py's own slot table; a
    redirect (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) is sent again through redis-py's cluster
    client, which follows it and updates that table, and after a connection error every
    command goes through redis-py until one succeeds (it rediscovers the cluster).
    """

    def __init__(self, settings: Settings, client: redis.Redis | RedisCluster) -> None:
        self.settings = settings
        self.client = client
        self.where = redact(settings.url.split("?", 1)[0])
        # idle raw connections by node name ("" on a single server); list ops are atomic
        self._free: dict[str, list[Connection]] = {}
        self._pid = os.getpid()
        self._via_client = False  # Cluster: route through redis-py until a call succeeds
        self.watch: sentinel.Watch | None = None  # Sentinel: follows failovers (per process)
        self.closed = False

    def _acquire(self, node: ClusterNode | None) -> tuple[list[Connection], Connection]:
        if self._pid != os.getpid():
            # A forked child must not share its parent's sockets: start afresh.
            self._free, self._pid = {}, os.getpid()
        name = "" if node is None else node.name
        free = self._free.get(name)
        if free is None:
            free = self._free.setdefault(name, [])
        try:
            return free, free.pop()
        except IndexError:
            if node is None:
                assert isinstance(self.client, redis.Redis)
                pool = self.client.connection_pool
            else:
                assert isinstance(self.client, RedisCluster)
                pool = self.client.get_redis_connection(node).connection_pool
            conn: Connection = pool.make_connection()  # type: ignore[assignment]
            if self.settings.sentinel:
                self._watching().track(conn)
            return free, conn

    def _watching(self) -> sentinel.Watch:
        if self.watch is None or self.watch.pid != os.getpid():
            assert isinstance(self.client, redis.Redis)
            manager = self.client.connection_pool.sentinel_manager  # type: ignore[attr-defined]
            self.watch = sentinel.Watch(self.settings, manager)  # a forked child: its own
        return self.watch

    def node_of(self, command: Sequence[Any]) -> ClusterNode | None:
        """Cluster: the primary owning a keyed command's slot, by redis-py's slot table;
        None when redis-py should route it (no key we know, or recovering from an error)."""
        name = command[0]
        if name in KEYED:
            key = command[1]
        elif name in ("EVALSHA", "EVAL") and int(command[2]) > 0:
            key = command[3]
        else:
            return None
        if self._via_client:
            return None
        assert isinstance(self.client, RedisCluster)
        nodes = self.client.nodes_manager.slots_cache.get(slot_of(key))
        return nodes[0] if nodes else None

    def raw(self, *args: Any) -> Any:
        """One command, one attempt."""
        if not self.settings.cluster:
            return self._exchange([args], None)[0]
        node = self.node_of(args)
        if node is None:
            return self._via_redis_py(args)
        try:
            return self._exchange([args], node)[0]
        except REDIRECTS:
            # The slot moved or is moving (resharding, failover). The node did not run the
            # command: redis-py sends it again, following the redirect as it always does,
            # and patches its slot table, which the next call reads.
            return self._via_redis_py(args)
        except TRANSIENT:
            self._via_client = True  # the node may be gone: let redis-py rediscover
            raise

    def raw_durable(self, *args: Any) -> Any:
        """One command, one attempt, then ``WAIT`` on the same connection until
        ``wait_replicas`` replicas hold it; fewer raise ``ReplicaShortfall`` (retried)."""
        want = self.settings.wait_replicas
        reply, copies = self._exchange(
            [args, ("WAIT", want, int(self.settings.wait_timeout * 1000))], None,
            errors_in_place=True)
        for answer in (reply, copies):
            if isinstance(answer, Exception):
                raise answer
        if int(copies) < want:
            raise ReplicaShortfall(f"only {copies} of {want} replicas confirmed a write within "
                                   f"{self.settings.wait_timeout:g} s (wait_replicas)")
        return reply

    def _via_redis_py(self, args: Sequence[Any]) -> Any:
        assert isinstance(self.client, RedisCluster)
        reply = self.client.execute_command(*args)  # type: ignore[no-untyped-call]
        self._via_client = False
        return reply

    def same_node(self, *commands: Sequence[Any]) -> bool:
        """Whether ``raw_many`` can send these commands: always on a single server; on
        Cluster when one node owns the slots of all of them."""
        if not self.settings.cluster:
            return True
        nodes = {self.node_of(command) for command in commands}
        return len(nodes) == 1 and None not in nodes

    def raw_many(self, *commands: Sequence[Any]) -> list[Any]:
        """Several commands in one write on one connection, one attempt (on Cluster only
        commands ``same_node`` accepts).

        Redis runs them in order, so a command queued behind a blocking one runs the moment
        it returns, with no round trip between. An error reply is returned in its place as
        the ``redis.ResponseError`` it would have raised, and the other replies are kept.
        """
        node = None
        if self.settings.cluster:
            node = self.node_of(commands[0])
            assert node is not None and self.same_node(*commands), "commands span nodes"
        try:
            replies = self._exchange(commands, node, errors_in_place=True)
        except TRANSIENT:
            self._via_client = self.settings.cluster
            raise
        if any(isinstance(reply, REDIRECTS) for reply in replies):
            self._via_client = True  # redis-py learns the new owner on its next call
        return replies

    def _exchange(self, commands: Sequence[Sequence[Any]], node: ClusterNode | None,
                  errors_in_place: bool = False) -> list[Any]:
        return self.send(commands, node, errors_in_place)()

    def send(self, commands: Sequence[Sequence[Any]], node: ClusterNode | None,
             errors_in_place: bool = False, packed: list[bytes] | None = None
             ) -> Callable[[], list[Any]]:
        """Write ``commands`` now (``packed``: their wire form, made beforehand), one attempt,
        on a connection to ``node`` (None on a single server; on Cluster a node ``same_node``
        accepts); the function returned reads their replies (as ``raw_many`` with
        ``errors_in_place``) and gives the connection back: until then it is the caller's,
        who works while Redis runs them."""
        free, conn = self._acquire(node)
        try:
            conn.send_packed_command(packed or _pack(conn, commands))  # type: ignore[no-untyped-call]
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            free.append(conn)  # reconnects on its next use
            raise
        return partial(self._receive, free, conn, len(commands), errors_in_place)

    def _receive(self, free: list[Connection], conn: Connection, count: int,
                 errors_in_place: bool) -> list[Any]:
        replies: list[Any] = []
        try:
            for _ in range(count):
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    if not errors_in_place:
                        raise
                    replies.append(exc)
        except TRANSIENT:
            conn.disconnect()  # type: ignore[no-untyped-call]
            free.append(conn)  # reconnects on its next use
            raise
        except BaseException:
            # An error reply leaves the connection usable; anything else (an interrupt in
            # the middle of a reply) may not, so it is dropped.
            if not isinstance(sys.exc_info()[1], redis.ResponseError):
                conn.disconnect()  # type: ignore[no-untyped-call]
            free.append(conn)
            raise
        if self.closed:  # closed while this call was blocked (a wait): do not keep it
            conn.disconnect()  # type: ignore[no-untyped-call]
        else:
            free.append(conn)
        return replies

    def call(self, *args: Any, patience: float = 5.0) -> Any:
        """One command, retried with backoff for up to ``patience`` seconds of outage."""
        return self.retrying(lambda: self.raw(*args), patience)

    def call_many(self, *commands: Sequence[Any], patience: float = 5.0) -> list[Any]:
        """Several read commands in one round trip where ``same_node`` allows (else, and on a
        slot being moved, one by one), retried as ``call``; an error reply raises
        ``StorageError``."""
        def apart() -> list[Any]:
            return [self.call(*command, patience=patience) for command in commands]

        if not self.same_node(*commands):
            return apart()

        def many() -> list[Any] | None:
            replies = self.raw_many(*commands)
            if any(isinstance(reply, REDIRECTS) for reply in replies):
                return None  # a slot on the move: each command follows it on its own
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            return replies

        replies = self.retrying(many, patience)
        return apart() if replies is None else replies

    def retrying(self, fn: Callable[[], T], patience: float = 5.0) -> T:
        """Run ``fn``, retrying transient failures with exponential backoff; an error reply
        (or any other failure of the client) becomes ``StorageError``."""
        try:
            return self._retrying(fn, patience)
        except (redis.RedisError, RedisClusterException) as exc:
            raise self.refused(exc) from None

    def refused(self, exc: Exception) -> StorageError:
        """The ``StorageError`` an error reply from the server is reported as."""
        return StorageError(f"Redis at {self.where} answered with an error: {self.scrub(exc)}")

    def _retrying(self, fn: Callable[[], T], patience: float) -> T:
        deadline = time.monotonic() + patience
        delay = 0.02
        while True:
            try:
                return fn()
            except redis.AuthenticationError as exc:
                raise StorageUnavailable(f"Redis at {self.where} refused the login: "
                                         f"{self.scrub(exc)}") from None
            except TRANSIENT as exc:
                if self.closed or time.monotonic() + delay > deadline:
                    raise StorageUnavailable(self.unreachable(exc)) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def unreachable(self, exc: BaseException) -> str:
        """The one line an outage is reported as (on Sentinel: why no primary was found)."""
        if self.settings.sentinel and isinstance(exc, MasterNotFoundError):
            return f"Redis at {self.where}: {self.scrub(sentinel.explain(self.settings))}"
        return f"Redis at {self.where} is unreachable: {self.scrub(exc)}"

    def scrub(self, exc: BaseException | str) -> str:
        """An error's text with the password taken out, should a library ever echo it."""
        return scrub(self.settings, exc)

    def check_open(self) -> None:
        """One PING, as ``open`` needs it: an outage, or a server that refuses us or does
        not speak Redis, raises ``StorageUnavailable`` saying which."""
        try:
            self._retrying(lambda: self.raw("PING"), patience=1.0)
        except TypeError as exc:  # redis-py passes unknown query options to the connection
            raise StorageURLError(f"Redis URL {redact(self.settings.url)!r} has an option the "
                                  f"redis client does not take: {exc}") from None
        except redis.ResponseError as exc:  # e.g. "DB index is out of range", NOPERM
            raise StorageUnavailable(f"Redis at {self.where} refused the connection: "
                                     f"{self.scrub(exc)}") from None
        except redis.RedisError as exc:  # InvalidResponse: something else listens there
            raise StorageUnavailable(f"{self.where} does not answer like a Redis server: "
                                     f"{self.scrub(exc)}") from None

    def close(self) -> None:
        """Drop every connection. Idempotent."""
        self.closed = True
        if self.watch is not None:
            self.watch.stop()
        lists, self._free = self._free, {}
        for conns in lists.values():
            for conn in conns:
                conn.disconnect()  # type: ignore[no-untyped-call]
        self.client.close()
