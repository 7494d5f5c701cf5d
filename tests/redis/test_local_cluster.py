"""The tests' (and the benchmark suite's) local Redis Cluster starts even when a port it
chose is taken before its node binds it: a node that exits at start moves to new ports."""

from __future__ import annotations

import socket

import pytest

from tests.support.redis_server import RedisCluster, _send

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


def test_a_node_whose_bus_port_was_taken_moves_to_free_ports() -> None:
    cluster = RedisCluster(masters=3)
    first = cluster.ports[0]
    with socket.socket() as squatter:  # what an outgoing connection's port can do
        squatter.bind(("127.0.0.1", first + 10000))
        squatter.listen()
        with cluster:
            assert first not in cluster.ports
            assert str(cluster.ports[0]) in cluster.url
            assert all(b"cluster_state:ok" in _send(p, "CLUSTER", "INFO") for p in cluster.ports)
