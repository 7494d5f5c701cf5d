"""A real RabbitMQ node for development and tests: Debian's rabbitmq-server, a private node
in a temp dir (``conveyor dev broker rabbitmq``; the tests' fixtures start the same).

The node
never touches a RabbitMQ service or an ``epmd`` the machine may run: its own node name
(``conveyor-<port>@localhost``), AMQP port, distribution port and ``ERL_EPMD_PORT``, its own
``HOME`` (the Erlang cookie), data, log and config files under one temp dir; this module starts
the node's ``epmd`` itself, in the foreground, so stopping the node leaves nothing behind.
When this process is root (CI containers are) everything runs as ``nobody``, as the
PostgreSQL test server does. ``guest`` may connect from 127.0.0.1 (``loopback_users = none``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile

from conveyor.dev.process import ManagedServer, demote, free_port, listening, wait_ready

__all__ = ["RabbitServer", "rabbitmq_installed"]

_SBIN = "/usr/lib/rabbitmq/bin"
_START_TIMEOUT = 60.0
# The AMQP 0-9-1 protocol header; a broker that is up answers with a Connection.Start frame.
_HEADER = b"AMQP\x00\x00\x09\x01"


def rabbitmq_installed() -> bool:
    """Whether Debian's rabbitmq-server (its scripts and Erlang) is installed."""
    return all(os.access(os.path.join(_SBIN, b), os.X_OK)
               for b in ("rabbitmq-server", "rabbitmqctl")) and shutil.which("epmd") is not None


class RabbitServer(ManagedServer):
    """A private RabbitMQ node on 127.0.0.1:<free port>; ``url`` connects as ``guest``."""

    def __init__(self, tls: tuple[str, str, str] | None = None, port: int = 0) -> None:
        """``tls``: (certificate, key, CA) files to also listen for ``amqps://`` on
        ``tls_port`` (``tls_url``); ``port``: the AMQP port (0: a free one)."""
        self.port = port or free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = f"conveyor-{self.port}@localhost"
        self.dir = tempfile.mkdtemp(prefix=f"conveyor-rabbit-{self.port}-")
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.tls_port = free_port() if tls is not None else 0
        self.tls_url = f"amqps://guest:guest@127.0.0.1:{self.tls_port}/%2F"
        self.log_path = os.path.join(self.dir, "node.log")
        self.process: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self._preexec, uid, gid = demote()
        for name in ("mnesia", "log"):
            os.makedirs(os.path.join(self.dir, name))
        with open(os.path.join(self.dir, "rabbitmq.conf"), "w", encoding="utf-8") as conf:
            conf.write(f"listeners.tcp.default = {self.port}\n"
                       "loopback_users = none\n"
                       "disk_free_limit.absolute = 10MB\n"
                       "log.console = false\n"
                       "log.file.level = warning\n")
            if tls is not None:  # copied in: the node runs as nobody and must read them
                for name, src in zip(("cert.pem", "key.pem", "ca.pem"), tls, strict=True):
                    shutil.copyfile(src, os.path.join(self.dir, name))
                conf.write(f"listeners.ssl.default = {self.tls_port}\n"
                           f"ssl_options.certfile = {self.dir}/cert.pem\n"
                           f"ssl_options.keyfile = {self.dir}/key.pem\n"
                           f"ssl_options.cacertfile = {self.dir}/ca.pem\n"
                           "ssl_options.verify = verify_none\n"
                           "ssl_options.fail_if_no_peer_cert = false\n")
        with open(os.path.join(self.dir, "enabled_plugins"), "w", encoding="utf-8") as f:
            f.write("[].\n")
        if uid is not None and gid is not None:
            for root, dirs, files in os.walk(self.dir):
                for name in (*dirs, *files):
                    os.chown(os.path.join(root, name), uid, gid)
            os.chown(self.dir, uid, gid)

    @property
    def env(self) -> dict[str, str]:
        """The environment every rabbitmq script and ``epmd`` of this node runs with."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.dir,
            "LANG": "C.UTF-8",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": os.path.join(self.dir, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(self.dir, "log"),
            "RABBITMQ_CONFIG_FILE": os.path.join(self.dir, "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(self.dir, "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": os.path.join(self.dir, "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.dir, "enabled_plugins"),
            "RABBITMQ_PID_FILE": os.path.join(self.dir, "node.pid"),
        }

    def start(self) -> RabbitServer:
        """Start epmd and the node, and wait until it speaks AMQP."""
        if self.epmd is None or self.epmd.poll() is not None:
            self.epmd = subprocess.Popen(
                ["epmd", "-port", str(self.epmd_port)], env=self.env,
                preexec_fn=self._preexec, start_new_session=True,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # The node must find its epmd listening: one it cannot reach, it starts itself on
            # the same port, and of the two racing for it, the loser (or the node) exits.
            wait_ready(self.epmd, lambda: listening(self.epmd_port), _START_TIMEOUT,
                       f"epmd of {self.node} on port {self.epmd_port}", self.log_path)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                [os.path.join(_SBIN, "rabbitmq-server")], env=self.env, stdout=log,
                stderr=subprocess.STDOUT, preexec_fn=self._preexec, start_new_session=True)
        finally:
            log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        wait_ready(self.process, self.answers, _START_TIMEOUT,
                   f"RabbitMQ node {self.node}", self.log_path, interval=0.1)

    def answers(self) -> bool:
        """True when the node answers the AMQP protocol header with a frame."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(_HEADER)
                return sock.recv(1) == b"\x01"  # frame type 1: method (Connection.Start)
        except OSError:
            return False

    def ctl(self, *args: str) -> str:
        """Run ``rabbitmqctl`` against this node; returns its output (raises on failure)."""
        done = subprocess.run([os.path.join(_SBIN, "rabbitmqctl"), "-n", self.node, *args],
                              env=self.env, preexec_fn=self._preexec, capture_output=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: "
                               f"{done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode(errors="replace")

    def add_user(self, user: str, password: str, vhost: str = "/",
                 permissions: tuple[str, str, str] | None = (".*", ".*", ".*")) -> str:
        """A user (and its vhost, if new); ``permissions`` None leaves it none. Returns the
        URL that connects as it."""
        if vhost != "/":
            with contextlib.suppress(RuntimeError):
                self.ctl("add_vhost", vhost)
        self.ctl("add_user", user, password)
        if permissions is not None:
            self.ctl("set_permissions", "-p", vhost, user, *permissions)
        quoted = vhost.replace("/", "%2F")
        return f"amqp://{user}:{password}@127.0.0.1:{self.port}/{quoted}"

    def stop(self) -> None:
        """Stop the node (SIGTERM, then SIGKILL); its durable queues stay on disk."""
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)  # a frozen node ignores SIGTERM
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def freeze(self) -> None:
        """SIGSTOP the node: it neither answers nor closes connections, as behind a network
        partition (clients' writes hang, publishes go unconfirmed). ``thaw`` resumes it."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT a frozen node."""
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        assert self.process is not None, "node not started"
        os.killpg(self.process.pid, signum)

    def cleanup(self) -> None:
        """Stop the node and its epmd, remove the temp dir."""
        self.stop()
        if self.epmd is not None and self.epmd.poll() is None:
            self.epmd.kill()
            self.epmd.wait()
        self.epmd = None
        shutil.rmtree(self.dir, ignore_errors=True)
