"""Redis connections from a storage URL, with retries and clear errors.

``redis://[user:pass@]host:port/db``, ``rediss://`` (TLS), ``valkey://``,
``redis+cluster://host1:7000,host2:7001`` (``rediss+cluster://`` with TLS); the query may hold
``prefix=NAME`` (default ``conveyor``) and redis-py options such as ``ssl_ca_certs``.
Passwords never reach a log line or an error message (``conveyor.storage.redact``).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import Connection
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

import redis
from conveyor.errors import StorageError, StorageUnavailable, StorageURLError
from conveyor.storage import redact, url_secrets

T = TypeVar("T")

DEFAULT_PREFIX = "conveyor"
SOCKET_TIMEOUT = 30.0  # longer than any blocking wait() we issue
CONNECT_TIMEOUT = 5.0
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, OSError)

# What redis-py's own hiredis serializer ends in, without its per-argument Python loop (a
# script call has 20-30 arguments: ~10 µs saved per call on a small VM).
_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None = (
    importlib.import_module("hiredis").pack_command if HIREDIS_AVAILABLE else None)


@dataclass(frozen=True, slots=True)
class Settings:
    """What a storage URL says: where Redis is, how to log in, and the key prefix."""

    url: str
    cluster: bool
    prefix: str
    hosts: tuple[tuple[str, int], ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    single_url: str = ""


def parse_url(url: str) -> Settings:
    """Split a storage URL into client settings; raises ``StorageURLError`` when malformed."""
    scheme = url.partition("://")[0].lower()
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    prefix = query.pop("prefix", DEFAULT_PREFIX) or DEFAULT_PREFIX
    if scheme in ("redis+cluster", "rediss+cluster"):
        return _cluster_settings(url, scheme, parts.netloc, query, prefix)
    if scheme not in ("redis", "rediss", "valkey", "valkeys"):
        raise StorageURLError(f"not a Redis URL: {redact(url)!r}")
    real_scheme = "rediss" if scheme in ("rediss", "valkeys") else "redis"
    clean = urlunsplit((real_scheme, parts.netloc, parts.path, urlencode(query), ""))
    if not parts.hostname:
        raise StorageURLError(f"Redis URL {redact(url)!r} names no host")
    try:
        port = parts.port or 6379
    except ValueError:  # urllib's "Port could not be cast to integer value as 'x'"
        raise StorageURLError(f"Redis URL {redact(url)!r} has a port that is not a number "
                              "from 1 to 65535") from None
    database = parts.path.lstrip("/")
    if database and not database.isdigit():
        raise StorageURLError(f"Redis URL {redact(url)!r} names database {database!r}; the "
                              "path must be a database number, e.g. redis://host:6379/0")
    return Settings(url=url, cluster=False, prefix=prefix, single_url=clean,
                    hosts=((parts.hostname, port),))


def _cluster_settings(
    url: str, scheme: str, netloc: str, query: dict[str, str], prefix: str
) -> Settings:
    creds, _, hostlist = netloc.rpartition("@")
    user, colon, password = creds.partition(":")
    hosts = []
    for item in filter(None, hostlist.split(",")):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise StorageURLError(f"bad host:port {item!r} in {redact(url)!r}")
        hosts.append((host, int(port)))
    if not hosts:
        raise StorageURLError(f"Redis Cluster URL {redact(url)!r} names no host")
    options: dict[str, Any] = dict(query)
    if user:
        options["username"] = user
    if colon:
        options["password"] = password
    if scheme == "rediss+cluster":
        options["ssl"] = True
    return Settings(url=url, cluster=True, prefix=prefix, hosts=tuple(hosts), options=options)


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
    if settings.cluster:
        nodes = [ClusterNode(host, port)  # type: ignore[no-untyped-call]
                 for host, port in settings.hosts]
        try:
            return RedisCluster(startup_nodes=nodes, **common, **settings.options)
        except (RedisClusterException, redis.RedisError) as exc:
            # The client discovers the cluster as it is built: no node reachable, or a
            # server that is not in cluster mode, fails here rather than at the first call.
            raise StorageUnavailable(f"Redis Cluster at {redact(settings.url.split('?')[0])} "
                                     f"cannot be used: {scrub(settings, exc)}") from None
    return redis.Redis.from_url(
        settings.single_url, retry=Retry(NoBackoff(), 0), **common
    )


def scrub(settings: Settings, exc: BaseException) -> str:
    """An error's text with every secret of the URL taken out, should a library echo one."""
    text = str(exc) or type(exc).__name__
    secrets = url_secrets(settings.url)
    if settings.options.get("password"):
        secrets.append(str(settings.options["password"]))
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


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

    On a single server commands go straight through idle raw connections kept in a free list
    (one per concurrent caller at most): a round trip costs a third of a pooled
    ``execute_command``, which is what makes one-by-one enqueue fast.
    """

    def __init__(self, settings: Settings, client: redis.Redis | RedisCluster) -> None:
        self.settings = settings
        self.client = client
        self.where = redact(settings.url.split("?", 1)[0])
        self._free: list[Connection] = []  # idle raw connections; list ops are atomic
        self._pid = os.getpid()
        self.closed = False

    def _acquire(self) -> Connection:
        if self._pid != os.getpid():
            # A forked child must not share its parent's sockets: start afresh.
            self._free, self._pid = [], os.getpid()
        try:
            return self._free.pop()
        except IndexError:
            assert isinstance(self.client, redis.Redis)
            conn: Connection = self.client.connection_pool.make_connection()  # type: ignore[assignment]
            return conn

    def raw(self, *args: Any) -> Any:
        """One command, one attempt."""
        if self.settings.cluster:
            assert isinstance(self.client, RedisCluster)
            return self.client.execute_command(*args)  # type: ignore[no-untyped-call]
        return self._exchange([args])[0]

    def raw_many(self, *commands: Sequence[Any]) -> list[Any]:
        """Several commands in one write on one connection, one attempt; single server only.

        Redis runs them in order, so a command queued behind a blocking one runs the moment
        it returns, with no round trip between. An error reply is returned in its place as
        the ``redis.ResponseError`` it would have raised, and the other replies are kept.
        """
        assert not self.settings.cluster, "pipelining across slots needs a cluster pipeline"
        return self._exchange(commands, errors_in_place=True)

    def _exchange(self, commands: Sequence[Sequence[Any]], errors_in_place: bool = False
                  ) -> list[Any]:
        conn = self._acquire()
        replies: list[Any] = []
        try:
            conn.send_packed_command(_pack(conn, commands))  # type: ignore[no-untyped-call]
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    if not errors_in_place:
                        raise
                    replies.append(exc)
        except TRANSIENT:
            conn.disconnect()  # type: ignore[no-untyped-call]
            self._free.append(conn)  # reconnects on its next use
            raise
        except BaseException:
            # An error reply leaves the connection usable; anything else (an interrupt in
            # the middle of a reply) may not, so it is dropped.
            if not isinstance(sys.exc_info()[1], redis.ResponseError):
                conn.disconnect()  # type: ignore[no-untyped-call]
            self._free.append(conn)
            raise
        if self.closed:  # closed while this call was blocked (a wait): do not keep it
            conn.disconnect()  # type: ignore[no-untyped-call]
        else:
            self._free.append(conn)
        return replies

    def call(self, *args: Any, patience: float = 5.0) -> Any:
        """One command, retried with backoff for up to ``patience`` seconds of outage."""
        return self.retrying(lambda: self.raw(*args), patience)

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
                    raise StorageUnavailable(
                        f"Redis at {self.where} is unreachable: {self.scrub(exc)}"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def scrub(self, exc: BaseException) -> str:
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
        conns, self._free = self._free, []
        for conn in conns:
            conn.disconnect()  # type: ignore[no-untyped-call]
        self.client.close()
