"""A Sentinel-managed Redis for tests: one primary, two replicas and three Sentinels
(``redis-server --sentinel``), all real processes on free loopback ports in their own temp
dirs.

A plain module (no pytest import), like ``redis_server``. The Sentinels judge a primary down
after ``down_after_ms`` (1 s by default, 30 s in a stock ``sentinel.conf``) so a failover
takes seconds, not a minute. ``url()`` is the ``redis+sentinel://`` URL of the group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from tests.support.redis_server import RedisServer, _send, free_port
from tests.support.waiting import wait_until

__all__ = ["MASTER_NAME", "RedisSentinelGroup", "SentinelProcess"]

MASTER_NAME = "mymaster"
# Sentinels find the replicas through the primary's INFO every 10 s and each other through
# hello messages every 2 s; a clean-clone CI run once saw a group not settled after 30 s (a
# fixture wait, not a measured figure): give slow starts room.
_READY_TIMEOUT = 90.0


class SentinelProcess(RedisServer):
    """One ``redis-server <conf> --sentinel`` watching the group's primary."""

    def __init__(self, monitor_port: int, *, down_after_ms: int, failover_timeout_ms: int,
                 password: str | None, sentinel_password: str | None) -> None:
        super().__init__(password=sentinel_password)
        self.conf = os.path.join(self.dir, "sentinel.conf")
        lines = [
            f"port {self.port}", "bind 127.0.0.1", f"dir {self.dir}",
            f"logfile {os.path.join(self.dir, 'sentinel.log')}",
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {monitor_port} 2",
            f"sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}",
            f"sentinel failover-timeout {MASTER_NAME} {failover_timeout_ms}",
            f"sentinel parallel-syncs {MASTER_NAME} 2",
        ]
        if password:
            lines.append(f"sentinel auth-pass {MASTER_NAME} {password}")
        if sentinel_password:
            # Sentinels log in to each other with their own requirepass.
            lines.append(f"requirepass {sentinel_password}")
        with open(self.conf, "w") as out:  # Sentinel rewrites this file as it learns
            out.write("\n".join(lines) + "\n")

    def _args(self) -> list[str]:
        return [self.binary, self.conf, "--sentinel"]

    def stop(self) -> None:
        """SIGTERM (a Sentinel has nothing to flush); SIGKILL if it does not exit."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except Exception:
                self.process.kill()
                self.process.wait()
        self.process = None

    def ask(self, *args: str) -> bytes:
        """One command to this Sentinel; the raw RESP reply."""
        return _send(self.port, *args, password=self.password)


class RedisSentinelGroup:
    """Primary + ``replicas`` replicas + ``sentinels`` Sentinels, started by ``start()``.

    ``servers[0]`` is the first primary; after a failover ask ``primary_port()``.
    """

    def __init__(self, *, replicas: int = 2, sentinels: int = 3, password: str | None = None,
                 sentinel_password: str | None = None, down_after_ms: int = 1000,
                 failover_timeout_ms: int = 5000) -> None:
        self.password = password
        self.sentinel_password = sentinel_password
        first = free_port()
        # A full sync starts at once, not after Redis's default 5 s wait for more replicas.
        auth = ["--repl-diskless-sync-delay", "0"]
        auth += ["--masterauth", password] if password else []
        self.servers = [RedisServer(password=password, port=first, extra=auth)]
        self.servers += [
            RedisServer(password=password, extra=[*auth, "--replicaof", "127.0.0.1", str(first)])
            for _ in range(replicas)
        ]
        self._unsettled = "nothing asked yet"  # what _settled last found missing
        self.sentinels = [
            SentinelProcess(first, down_after_ms=down_after_ms,
                            failover_timeout_ms=failover_timeout_ms, password=password,
                            sentinel_password=sentinel_password)
            for _ in range(sentinels)
        ]

    def url(self, query: str = "", *, db: int = 0) -> str:
        """The group's ``redis+sentinel://`` URL (``query`` without its ``?``)."""
        auth = f":{self.password}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        # The caller's query last: tests append to a URL's prefix (``...?prefix=t1`` + ``e0``).
        options = [f"sentinel_password={self.sentinel_password}"] if self.sentinel_password else []
        options += [query] if query else []
        tail = "?" + "&".join(options) if options else ""
        return f"redis+sentinel://{auth}{hosts}/{MASTER_NAME}/{db}{tail}"

    def start(self) -> RedisSentinelGroup:
        """Start every process; return once every Sentinel sees the primary, both replicas
        and the other Sentinels, and the replicas are in sync."""
        try:
            for server in self.servers:
                server.start()
            for sentinel in self.sentinels:
                sentinel.start()
            try:
                wait_until(self._settled, _READY_TIMEOUT, 0.05,
                           "the Sentinels to see the whole group")
            except AssertionError as exc:  # say what was missing: a red run is read, not rerun
                raise AssertionError(f"{exc}; last seen: {self._unsettled}") from None
        except BaseException:
            self.stop()
            raise
        return self

    def _settled(self) -> bool:
        want_replicas = len(self.servers) - 1
        want_peers = len(self.sentinels) - 1
        for sentinel in self.sentinels:
            info = sentinel.ask("INFO", "sentinel").decode(errors="replace")
            if (f"slaves={want_replicas}," not in info
                    or f"sentinels={want_peers + 1}" not in info
                    or "status=ok" not in info):
                self._unsettled = f"Sentinel {sentinel.port}: {info.strip().splitlines()[-1:]}"
                return False
        return self.replicas_online()

    def replicas_online(self) -> bool:
        """The primary has every other live server as a replica whose first sync is done
        (``state=online``) and each replica's link to it is up.

        Not "at the primary's offset": the Sentinels PUBLISH their hello to the primary every
        2 s, which moves its offset, and a replica acknowledges once a second, so with three
        Sentinels the offsets can stay a hello apart for as long as one waits. Nothing is
        written before the group is up, so a finished first sync is what matters here."""
        port = self.primary_port()
        primary = self.server(port)
        if primary is None:
            self._unsettled = f"no server answers as the primary (port {port})"
            return False
        info = self.info(primary, "replication")
        replicas = [s for s in self.servers if s.process is not None and s.port != port]
        lines = [line for line in info.splitlines() if line.startswith("slave")]
        self._unsettled = f"primary {port}: {lines}"
        return (len(lines) == len(replicas)
                and all("state=online" in line for line in lines)
                and all("master_link_status:up" in self.info(r, "replication")
                        for r in replicas))

    def info(self, server: RedisServer, section: str) -> str:
        """A data node's ``INFO section`` text ('' when it does not answer)."""
        with contextlib.suppress(OSError):
            return _send(server.port, "INFO", section, password=self.password).decode(
                errors="replace")
        return ""

    def role(self, server: RedisServer) -> str:
        """``master`` or ``slave`` as the server itself says ('' when it does not answer)."""
        return _field(self.info(server, "replication"), "role")

    def primary_port(self) -> int:
        """The primary's port as a majority of the Sentinels report it."""
        votes: dict[int, int] = {}
        for sentinel in self.sentinels:
            if sentinel.process is None:
                continue
            with contextlib.suppress(OSError):
                reply = sentinel.ask("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
                port = int(reply.split(b"\r\n")[-2])
                votes[port] = votes.get(port, 0) + 1
        return max(votes, key=lambda p: votes[p]) if votes else 0

    def server(self, port: int) -> RedisServer | None:
        """The data node on ``port``."""
        return next((s for s in self.servers if s.port == port), None)

    def primary(self) -> RedisServer:
        """The data node the Sentinels report as the primary now."""
        server = self.server(self.primary_port())
        assert server is not None, "no primary reported"
        return server

    def wait_failover(self, old_port: int, timeout: float = 60.0) -> tuple[int, float]:
        """Wait until the Sentinels name a primary other than ``old_port`` that says it is
        one; returns its port and the wall-clock time it was seen."""
        def promoted() -> int:
            port = self.primary_port()
            server = self.server(port)
            if port and port != old_port and server is not None and self.role(server) == "master":
                return port
            return 0
        port = wait_until(promoted, timeout, 0.02, "the Sentinels to promote a replica")
        return port, time.time()

    def failover(self) -> None:
        """``SENTINEL FAILOVER``: promote a replica by hand (asked of the first live one)."""
        for sentinel in self.sentinels:
            if sentinel.process is not None:
                reply = sentinel.ask("SENTINEL", "FAILOVER", MASTER_NAME)
                assert reply.startswith(b"+OK"), reply
                return

    def pause(self, server: RedisServer) -> None:
        """SIGSTOP a data node (it neither answers nor notices time passing)."""
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)

    def resume(self, server: RedisServer) -> None:
        """SIGCONT a paused data node."""
        assert server.process is not None
        server.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop every process (paused ones too) and remove the temp dirs."""
        for server in self.servers:
            if server.process is not None and server.process.poll() is None:
                server.process.send_signal(signal.SIGCONT)
        for sentinel in self.sentinels:
            sentinel.cleanup()
        for server in self.servers:
            server.kill()  # no data to keep: SIGKILL is quicker than SHUTDOWN's save
            server.cleanup()

    def __enter__(self) -> RedisSentinelGroup:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _field(info: str, name: str) -> str:
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return ""
