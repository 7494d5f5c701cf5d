"""Redis Cluster routing: commands go straight to the node owning their slot, and a slot that
moves (ASK while it migrates, MOVED once it has) is followed, on a real cluster."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import redis
from conveyor.core.job import Ack, JobSpec, JobState, Outcome
from conveyor.storage.redis.connection import slot_of
from conveyor.storage.redis.storage import RedisStorage, open_redis
from tests.redis.conftest import prefixed
from tests.support.redis_server import RedisCluster

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


@pytest.fixture
def store(redis_cluster: Any) -> Iterator[RedisStorage]:
    storage = open_redis(prefixed(redis_cluster.url))
    yield storage
    storage.close()


def nodes(cluster: Any) -> dict[str, redis.Redis]:
    """A plain client per node, by its "host:port" name."""
    return {f"127.0.0.1:{port}": redis.Redis(port=port, decode_responses=True)
            for port in cluster.ports}


def owner(clients: dict[str, redis.Redis], slot: int) -> str:
    """The node that serves ``slot``, as the cluster itself says."""
    for start, end, primary, *_ in next(iter(clients.values())).execute_command(
            "CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            host, port = primary[0], primary[1]
            return f"{host.decode() if isinstance(host, bytes) else host}:{port}"
    raise AssertionError(f"slot {slot} is not served")


def job(job_id: str, queue: str) -> JobSpec:
    return JobSpec(id=job_id, name="t", queue=queue, payload="{}")


def test_a_migrating_then_moved_slot_is_followed(redis_cluster: Any,
                                                 store: RedisStorage) -> None:
    queue = "migrating"
    qk = store.keys.queue(queue)
    slot = slot_of(qk.pending)
    clients = nodes(redis_cluster)
    source = owner(clients, slot)
    target = next(name for name in clients if name != source)
    src, dst = clients[source], clients[target]
    src_id, dst_id = src.execute_command("CLUSTER", "MYID"), dst.execute_command("CLUSTER", "MYID")
    store.enqueue([job("before", queue)])
    assert store.link.node_of(("GET", qk.pending)).name == source  # type: ignore[union-attr]

    # Migrating: every key of the slot is moved to the target, the slot not yet handed
    # over. The source answers ASK for the (now missing) keys; a read must follow it. (A
    # script touching keys of which some do not exist gets TRYAGAIN there, by Redis's rules
    # for multi-key commands during a migration, so only reads are asked for here.)
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
    assert keys
    host, port = target.split(":")
    src.execute_command("MIGRATE", host, port, "", 0, 5000, "KEYS", *keys)
    assert src.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    assert dst.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == len(keys)
    record = store.get_job("before")
    assert record is not None and record.state is JobState.PENDING

    # Moved: the slot belongs to the target now; the storage's slot table still names the
    # source, which answers MOVED; the call is sent again where it belongs, and the table is
    # corrected for the next one.
    for client in clients.values():
        client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    store.enqueue([job("moved", queue)])
    assert dst.hexists(qk.jobs, "moved")
    assert store.link.node_of(("GET", qk.pending)).name == target  # type: ignore[union-attr]

    leased = store.dequeue([queue], "w", 10, 30)
    assert sorted(j.id for j in leased) == ["before", "moved"]
    assert store.get_job("moved").state is JobState.ACTIVE  # type: ignore[union-attr]
    for client in clients.values():
        client.close()


def queue_on(store: RedisStorage, same: bool) -> str:
    """A queue name whose slot is on the doorbells' node (``same``) or on another one."""
    doorbell = store.link.node_of(("BLPOP", store.keys.doorbell("x"), "1"))
    assert doorbell is not None
    for i in range(1000):
        queue = f"q{i}"
        here = store.link.node_of(("GET", store.keys.queue(queue).pending))
        if (here == doorbell) is same:
            return queue
    raise AssertionError("no queue name found")


@pytest.mark.parametrize("same", [True, False], ids=["doorbell-node", "other-node"])
def test_wait_dequeue_leases_what_is_enqueued_while_it_waits(
        store: RedisStorage, same: bool) -> None:
    queue = queue_on(store, same)
    other = open_redis(store.url)
    got: list[list[str]] = []
    waiter = threading.Thread(target=lambda: got.append(
        [j.id for j in store.wait_dequeue([queue], [queue], "w", 5, 30, 20.0)]))
    waiter.start()
    # Whether the enqueue lands before or during the wait, the waiter must lease it: the
    # doorbell is rung after the job is stored.
    other.enqueue([job("late", queue)])
    waiter.join(timeout=30)
    assert got == [["late"]]
    other.close()


def test_a_restarted_node_is_reached_again() -> None:
    # A private cluster: one of its nodes is restarted under the storage's feet.
    with RedisCluster(masters=3) as cluster:
        store = open_redis(prefixed(cluster.url))
        queue = "restarted"
        store.enqueue([job("first", queue)])
        node = store.link.node_of(("GET", store.keys.queue(queue).pending))
        assert node is not None
        server = next(s for s in cluster.nodes if s.port == node.port)
        server.restart()  # no persistence: its jobs are gone, its slots are still its own
        # The storage's connection to it is dead; the call is retried until the node answers.
        store.enqueue([job("second", queue)])
        assert [j.id for j in store.dequeue([queue], "w", 10, 30)] == ["second"]
        store.close()


def test_a_job_put_back_by_its_ack_rings_the_doorbell(store: RedisStorage) -> None:
    # Idle workers on Cluster wait on the doorbell, not on the queue's notify list: a job an
    # acknowledgement puts back in the queue (a worker stopping) must ring it, as an enqueue
    # does, or the idle workers only see it at their next poll.
    queue = "putback"
    store.enqueue([job("back", queue)])
    [leased] = store.dequeue([queue], "w", 10, 30)
    bell = store.keys.doorbell(queue)
    store.link.call("DEL", bell)
    assert store.ack([Ack(leased.id, leased.token, Outcome.INTERRUPTED)]) == [True]
    assert int(store.link.call("LLEN", bell)) > 0
