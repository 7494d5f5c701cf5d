"""Real ``redis-server`` processes for tests: one standalone server, or a small local Cluster.

A plain module (no pytest import) so fixtures, benchmarks and scripts can all use it.
Every server listens on 127.0.0.1 on a free port and keeps its files in its own temp dir.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Sequence

__all__ = ["RedisCluster", "RedisServer", "free_port", "redis_server_binary"]

_START_TIMEOUT = 10.0


def redis_server_binary() -> str | None:
    """Path of ``redis-server``, or None when it is not installed."""
    return shutil.which("redis-server")


def redis_cli_binary() -> str | None:
    """Path of ``redis-cli``, or None when it is not installed."""
    return shutil.which("redis-cli")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free port whose cluster-bus twin (port + 10000) is free too, both below 55536."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 45000)
        if _port_is_free(port) and _port_is_free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _send(port: int, *args: str, password: str | None = None, timeout: float = 1.0,
          tls: ssl.SSLContext | None = None) -> bytes:
    """Send one RESP command (after AUTH when a password is set) and return the raw reply."""
    commands = ([("AUTH", password)] if password else []) + [args]
    payload = b"".join(_resp(cmd) for cmd in commands)
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    with tls.wrap_socket(raw) if tls is not None else raw as sock:
        sock.sendall(payload)
        data = b""
        deadline = time.monotonic() + timeout
        while data.count(b"\r\n") < len(commands) and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        # Bulk replies (INFO) may span several reads; read until the socket is quiet.
        sock.settimeout(0.05)
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                data += chunk
        return data


def _resp(args: Sequence[str]) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        raw = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class RedisServer:
    """A real ``redis-server`` on 127.0.0.1:<free port>, with its files in a temp dir.

    With ``tls=(cert, key, ca)`` the port speaks TLS only and ``url`` is ``rediss://``.
    """

    def __init__(
        self,
        *,
        password: str | None = None,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        extra: Sequence[str] = (),
        port: int | None = None,
        tls: tuple[str, str, str] | None = None,
    ) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.password = password
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra = tuple(extra)
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix=f"conveyor-redis-{self.port}-")
        self.process: subprocess.Popen[bytes] | None = None
        self.tls = tls
        self._tls_context: ssl.SSLContext | None = None
        if tls is not None:
            self._tls_context = ssl.create_default_context(cafile=tls[2])
            self._tls_context.check_hostname = False
        auth = f":{password}@" if password else ""
        scheme = "rediss" if tls else "redis"
        self.url = f"{scheme}://{auth}127.0.0.1:{self.port}/0"

    def _args(self) -> list[str]:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.dir,
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--daemonize", "no",
            "--logfile", os.path.join(self.dir, "redis.log"),
        ]
        if self.password:
            args += ["--requirepass", self.password]
        if self.tls is not None:
            cert, key, ca = self.tls
            args[args.index("--port") + 1] = "0"
            args += ["--tls-port", str(self.port), "--tls-cert-file", cert, "--tls-key-file", key,
                     "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"]
        return args + list(self.extra)

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING."""
        self.process = subprocess.Popen(
            self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited at start; see {self.dir}/redis.log")
            try:
                reply = _send(self.port, "PING", password=self.password, tls=self._tls_context)
            except OSError:
                reply = b""
            # A server still loading its AOF answers -LOADING; wait for +PONG.
            if b"+PONG" in reply:
                return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING in time")

    def stop(self) -> None:
        """Graceful SHUTDOWN (the AOF is flushed); kills the process if it does not exit."""
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                _send(self.port, "SHUTDOWN", password=self.password, tls=self._tls_context)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server, as a crash or power loss would."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        """Stop and start again on the same port and dir (the AOF/RDB files are kept)."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop and remove the temp dir."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()


class RedisCluster:
    """A local Redis Cluster: ``masters`` cluster-enabled servers joined by ``redis-cli``."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [self._node() for _ in range(masters)]
        self._named()

    @staticmethod
    def _node() -> RedisServer:
        return RedisServer(
            extra=[
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "5000",
            ],
            port=free_cluster_port(),
        )

    def _named(self) -> None:
        self.ports = [node.port for node in self.nodes]
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _start_node(self, i: int) -> None:
        """Start node ``i``; one that exits at start had its port or its bus port taken
        since they were chosen (the kernel hands ports of that range to outgoing
        connections too): it moves to new ports, twice at most."""
        for attempt in range(3):
            try:
                self.nodes[i].start()
                return
            except RuntimeError:
                if attempt == 2 or self.nodes[i].process is None \
                        or self.nodes[i].process.poll() is None:
                    raise  # not an exit at start: no new ports would help
                self.nodes[i].cleanup()
                self.nodes[i] = self._node()
                self._named()

    def start(self) -> RedisCluster:
        """Start every node, create the cluster, and wait for ``cluster_state:ok``."""
        cli = redis_cli_binary()
        if cli is None:
            raise RuntimeError("redis-cli is not installed (apt-get install redis-tools)")
        try:
            self._create(cli)
        except BaseException:
            self.stop()
            raise
        return self

    def _create(self, cli: str) -> None:
        for i in range(len(self.nodes)):
            self._start_node(i)
        subprocess.run(
            [cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
        )
        self._wait_ok()

    def _wait_ok(self) -> None:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            if all(b"cluster_state:ok" in _send(p, "CLUSTER", "INFO") for p in self.ports):
                return
            time.sleep(0.05)
        raise RuntimeError("the local Redis Cluster did not reach cluster_state:ok in time")

    def stop(self) -> None:
        """Stop every node and remove their temp dirs."""
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
