"""Redis Sentinel: find the primary through the Sentinels and follow it through failovers.

redis-py's ``redis.sentinel`` does the discovery: every new connection asks the Sentinels
where the primary is, and a ``READONLY`` reply (the server we were talking to was demoted)
drops the connection and raises ``ConnectionError``, which the storage retries like any
outage, on a new connection. Three things are added here:

* ``PrimaryConnection`` asks the server it reached for its ``ROLE`` before using it: right
  after a failover a Sentinel can still name the old primary, and a stale primary coming back
  believes it still is one, so only a server that says ``master`` takes a command.
* ``Watch`` listens for the Sentinels' ``+switch-master`` and shuts down every connection of
  the process at once. Without it a call waiting on a primary that froze (SIGSTOP, a VM
  pause, a partition) would wait for its socket timeout (30 s) before it moved over.
* ``explain`` turns "no primary found" into one line that says why: no Sentinel answered, or
  none of them watches a primary of that name, or they see it down (a failover under way).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import weakref
from typing import Any

from redis.backoff import NoBackoff
from redis.connection import Connection, SSLConnection
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection
from redis.utils import str_if_bytes

import redis
from conveyor.storage.redis.urls import Settings

SENTINEL_TIMEOUT = 2.0  # connect and reply timeout of each Sentinel asked
SWITCH = "+switch-master"  # published by a Sentinel once a failover has named a new primary


class PrimaryConnection(SentinelManagedConnection):
    """A connection to whatever the Sentinels name the primary, checked with ``ROLE``."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """As redis-py's, but a first send connects through the Sentinels (redis-py's own
        connects to the configured host, which only its pool's ``connect()`` avoids)."""
        if not self._sock:
            self.connect()  # type: ignore[no-untyped-call]
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    def connect_to(self, address: tuple[str, int]) -> None:
        """Connect, log in, and refuse (``ConnectionError``: retried) a server that is not a
        primary now."""
        super().connect_to(address)  # type: ignore[no-untyped-call]
        try:
            self.send_command("ROLE")  # type: ignore[no-untyped-call]
            role = self.read_response()
        except redis.ResponseError:
            return  # an ACL user without ROLE: the Sentinels' word has to do
        if str_if_bytes(role[0]) != "master":
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.ConnectionError(f"{address[0]}:{address[1]} is a {str_if_bytes(role[0])} "
                                        "now, not the primary (a failover is under way)")


class PrimarySSLConnection(PrimaryConnection, SSLConnection):
    """``PrimaryConnection`` over TLS."""


def sentinel_kwargs(settings: Settings) -> dict[str, Any]:
    """How to talk to each Sentinel: short timeouts, no retries of redis-py's own (the
    storage retries), the Sentinels' own login and TLS options from the URL."""
    return {"socket_timeout": SENTINEL_TIMEOUT, "socket_connect_timeout": SENTINEL_TIMEOUT,
            "retry": Retry(NoBackoff(), 0), **settings.sentinel_options}


def make_sentinel_client(settings: Settings, common: dict[str, Any]) -> redis.Redis:
    """A client of the primary the Sentinels name (discovered again on every connection)."""
    manager = Sentinel(list(settings.hosts),  # type: ignore[no-untyped-call]
                       sentinel_kwargs=sentinel_kwargs(settings))
    options = dict(settings.options)
    connection_class = PrimarySSLConnection if options.pop("ssl", False) else PrimaryConnection
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        settings.service, connection_class=connection_class, retry=Retry(NoBackoff(), 0),
        **common, **options)
    return client


class Watch:
    """Shuts down every connection of this process when the Sentinels switch the primary.

    One daemon thread per process (a forked child starts its own) subscribes to
    ``+switch-master`` on one Sentinel, moving to the next when that one fails; after each
    (re)subscription it compares the primary's address with the last one seen, so a switch
    missed meanwhile is acted on too. Shutting a socket down (not closing it: its owner
    may be reading it right now) ends the owner's wait with ``ConnectionError``; the storage
    then retries on a new connection, which asks the Sentinels afresh.
    """

    def __init__(self, settings: Settings) -> None:
        self.pid = os.getpid()
        self.settings = settings
        self.switches = 0
        self._known: tuple[str, int] | None = None
        self._conns: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="conveyor-sentinel-watch",
                                        daemon=True)
        self._thread.start()

    def track(self, conn: Connection) -> None:
        """Remember a connection to shut down at the next switch."""
        with self._lock:
            self._conns.add(conn)

    def switched(self) -> None:
        """A new primary: end every call in flight and make every idle connection reconnect."""
        self.switches += 1
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            sock = conn._sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        """End the thread (within a second); idempotent."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            for host, port in self.settings.hosts:
                if self._stop.is_set():
                    return
                with contextlib.suppress(redis.RedisError, OSError, IndexError, ValueError):
                    self._listen(host, port)
            self._stop.wait(0.5)  # no Sentinel answers: try them all again shortly

    def _listen(self, host: str, port: int) -> None:
        client = redis.Redis(host, port, decode_responses=True, **sentinel_kwargs(self.settings))
        pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(SWITCH)
            self._seen(client.sentinel_get_master_addr_by_name(
                self.settings.service))
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message is None:
                    continue
                # "<name> <old ip> <old port> <new ip> <new port>"
                name, _, _, ip, new_port = str(message["data"]).split()
                if name == self.settings.service:
                    self._seen((ip, int(new_port)))
        finally:
            pubsub.close()
            client.close()

    def _seen(self, address: Any) -> None:
        if not address:
            return
        address = (str(address[0]), int(address[1]))
        if self._known is not None and address != self._known:
            self.switched()
        self._known = address


def explain(settings: Settings) -> str:
    """Why no primary could be found, in one line, by asking each Sentinel."""
    failed: list[str] = []
    watched: set[str] = set()
    seen = False
    for host, port in settings.hosts:
        client = redis.Redis(host, port, decode_responses=True, **sentinel_kwargs(settings))
        try:
            masters: dict[str, Any] = client.sentinel_masters()  # type: ignore[assignment]
        except (redis.RedisError, OSError) as exc:
            failed.append(f"{host}:{port}: {str(exc).rstrip('.') or type(exc).__name__}")
            continue
        finally:
            client.close()
        watched |= set(masters)
        seen = seen or settings.service in masters
    if seen:
        return (f"the Sentinels see primary {settings.service!r} down or unreachable (a "
                "failover may be under way)")
    if watched or len(failed) < len(settings.hosts):
        names = ", ".join(sorted(map(repr, watched))) or "none"
        return (f"no Sentinel watches a primary named {settings.service!r} (they watch: "
                f"{names})")
    return "no Sentinel answered (" + "; ".join(failed) + ")"
