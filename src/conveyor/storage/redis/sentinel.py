"""Redis Sentinel: find the primary through the Sentinels and follow it through failovers.

redis-py's ``redis.sentinel`` does the discovery: every new connection asks the Sentinels
where the primary is, and a ``READONLY`` reply (the server we were talking to was demoted)
drops the connection and raises ``ConnectionError``, which the storage retries like any
outage, on a new connection. Three things are added here:

* ``PrimaryConnection`` asks the server it reached for its ``ROLE`` before using it: right
  after a failover a Sentinel can still name the old primary, and a stale primary coming back
  believes it still is one, so only a server that says ``master`` takes a command.
* ``Sentinels`` believes the Sentinel with the newest configuration, not the first to answer.
* ``Watch`` listens to every Sentinel for a promotion and a switch of the primary and moves
  every connection of the process at once. Without it a call waiting on a primary that froze
  (SIGSTOP, a VM pause, a partition) would wait for its socket timeout (30 s), and a
  connection to a primary failed over by hand would keep writing to it until it is demoted
  (seconds later), writes that the demotion throws away.
* ``explain`` turns "no primary found" into one line that says why: no Sentinel answered, or
  none of them watches a primary of that name, or they see it down (a failover under way).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import weakref
from typing import Any

from redis.backoff import NoBackoff
from redis.connection import Connection, SSLConnection
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelManagedConnection
from redis.utils import str_if_bytes

import redis
from conveyor.storage.redis.urls import Settings

SENTINEL_TIMEOUT = 2.0  # connect and reply timeout of each Sentinel asked
# Events a Sentinel publishes on itself. The one leading a failover announces the replica it
# chose (before it promotes it) and the promotion; every Sentinel announces the switch as it
# adopts the new primary; an abandoned failover is announced as an abort.
SWITCH = "+switch-master"
CHOSEN = ("+selected-slave", "+promoted-slave")
ABORTS = ("-failover-abort-not-elected", "-failover-abort-slave-timeout",
          "-failover-abort-no-good-slave")
AVOID = 30.0  # seconds an old primary is avoided after a promotion, unless a switch comes first


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
        watch: Watch | None = getattr(self, "watch", None)
        if watch is not None and watch.avoids(address):
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.ConnectionError(f"{address[0]}:{address[1]} is being failed over")
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


class Sentinels(Sentinel):
    """redis-py's Sentinel client, asking every Sentinel where the primary is: it believes
    the newest configuration (the highest epoch), as the Sentinels themselves do, and never
    the address a Sentinel is failing over (its ``failover_in_progress`` flag): right after
    a promotion the Sentinel leading it still names the old primary until every replica is
    moved, and the old primary still answers as one."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        """The primary's address; ``MasterNotFoundError`` (retried) while none is sure."""
        found: list[tuple[int, tuple[str, int]]] = []
        leaving: set[tuple[str, int]] = set()
        errors = []
        for sentinel in self.sentinels:
            try:
                masters: dict[str, Any] = sentinel.sentinel_masters()  # type: ignore[assignment]
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                errors.append(f"{sentinel} - {exc!r}")
                continue
            state = masters.get(service_name)
            if not state or not self.check_master_state(  # type: ignore[no-untyped-call]
                    state, service_name):
                continue
            address = (str(state["ip"]), int(state["port"]))
            if "failover_in_progress" in str(state.get("flags", "")):
                leaving.add(address)
            else:
                found.append((int(state.get("config-epoch", 0)), address))
        found = [item for item in found if item[1] not in leaving]
        if not found:
            raise MasterNotFoundError(f"No master found for {service_name!r}: {errors}")
        return max(found)[1]


def make_sentinel_client(settings: Settings, common: dict[str, Any]) -> redis.Redis:
    """A client of the primary the Sentinels name (discovered again on every connection; its
    pool's ``sentinel_manager`` is the ``Sentinels`` that finds it)."""
    manager = Sentinels(list(settings.hosts),  # type: ignore[no-untyped-call]
                        sentinel_kwargs=sentinel_kwargs(settings))
    options = dict(settings.options)
    connection_class = PrimarySSLConnection if options.pop("ssl", False) else PrimaryConnection
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        settings.service, connection_class=connection_class, retry=Retry(NoBackoff(), 0),
        **common, **options)
    return client


class Watch:
    """Moves every connection of this process off a primary the Sentinels gave up.

    One daemon thread per Sentinel (a forked child starts its own) subscribes to the events
    of a failover (``CHOSEN``, ``SWITCH``, ``ABORTS``). From the moment the leading Sentinel
    chose a replica, the old primary is *avoided* (``avoids``) until the switch, an abort or
    ``AVOID`` seconds: it still answers as a primary, and anything written to it once the
    replica is promoted would be thrown away when it is demoted. At a switch, and after each
    (re)subscription, every connection to another server than the primary is shut down (not
    closed: its owner may be reading it right now), which ends the owner's call with
    ``ConnectionError``; the storage retries it on a new connection, which asks the Sentinels
    afresh.
    """

    def __init__(self, settings: Settings, manager: Sentinels) -> None:
        self.pid = os.getpid()
        self.settings = settings
        self.manager = manager
        self.switches = 0
        self._avoid: dict[tuple[str, int], float] = {}
        self._conns: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        for host, port in settings.hosts:
            threading.Thread(target=self._run, args=(host, port), daemon=True,
                             name=f"conveyor-sentinel-watch-{port}").start()

    def track(self, conn: Connection) -> None:
        """Remember a connection to move at the next failover."""
        conn.watch = self  # type: ignore[attr-defined]  # read by PrimaryConnection.connect_to
        with self._lock:
            self._conns.add(conn)

    def avoids(self, address: tuple[str, int]) -> bool:
        """Whether ``address`` is a primary being failed over (not to be written to)."""
        until = self._avoid.get((str(address[0]), int(address[1])))
        return until is not None and time.monotonic() < until

    def moved(self, primary: tuple[str, int]) -> None:
        """``primary`` is the primary now: shut down every connection to another server."""
        with self._lock:
            conns = list(self._conns)
        moved = False
        for conn in conns:
            sock = conn._sock
            if sock is not None and (conn.host, int(conn.port)) != primary:
                moved = True
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self.switches += moved

    def stop(self) -> None:
        """End the threads (within a second); idempotent."""
        self._stop.set()

    def _run(self, host: str, port: int) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(redis.RedisError, OSError, IndexError, ValueError):
                self._listen(host, port)
            self._stop.wait(0.5)  # this Sentinel does not answer: try it again shortly

    def _listen(self, host: str, port: int) -> None:
        client = redis.Redis(host, port, decode_responses=True, **sentinel_kwargs(self.settings))
        pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(SWITCH, *CHOSEN, *ABORTS)
            # A switch missed while this thread was not subscribed is acted on now.
            with contextlib.suppress(redis.ConnectionError):
                self.moved(self.manager.discover_master(self.settings.service))
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message is not None:
                    self._event(message["channel"], str(message["data"]).split())
        finally:
            pubsub.close()
            client.close()

    def _event(self, channel: str, words: list[str]) -> None:
        if channel == SWITCH and words[0] == self.settings.service:
            # "<name> <old ip> <old port> <new ip> <new port>"
            self._avoid.pop((words[1], int(words[2])), None)
            self.moved((words[3], int(words[4])))
        elif channel in CHOSEN and words[5] == self.settings.service:
            # "slave <ip:port> <ip> <port> @ <name> <old ip> <old port>"
            self._avoid[(words[6], int(words[7]))] = time.monotonic() + AVOID
            self.moved((words[2], int(words[3])))
        elif channel in ABORTS and words[1] == self.settings.service:
            # "master <name> <ip> <port>": the old primary stays the primary
            self._avoid.pop((words[2], int(words[3])), None)


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
