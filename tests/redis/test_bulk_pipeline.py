"""The bulk path on Redis writes block k+1's script call once block k is stored and reads its
reply later (``storage/redis/pipeline.py``): the blocks land in order, a block Redis refuses
(or a batch that refuses its jobs) stops the call there, and a reply that asks for the call
again (a script cache flushed meanwhile) is answered by sending it again."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import redis
from conveyor import Conveyor
from conveyor.client.bulk import BLOCK_SIZE
from conveyor.client.registry import JobFunction
from conveyor.errors import BatchNotFound, StorageError
from conveyor.storage.redis.storage import RedisStorage
from tests.redis.conftest import prefixed

pytestmark = pytest.mark.redis


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def app(request: pytest.FixtureRequest) -> Iterator[Conveyor]:
    """An app on the session's server, or on the session's Cluster, with a prefix of its own."""
    server = request.getfixturevalue("redis_server" if request.param == "redis"
                                     else "redis_cluster")
    conveyor = Conveyor(prefixed(server.url))
    yield conveyor
    conveyor.close()


def _fn(app: Conveyor) -> JobFunction:
    def work(n: int) -> None: ...
    return app.job(name="tests.pipeline.work")(work)


def _storage(app: Conveyor) -> RedisStorage:
    storage = app.storage
    assert isinstance(storage, RedisStorage)
    return storage


def _raw(app: Conveyor) -> Any:
    """A plain redis-py client on the app's server (the key's node on a Cluster)."""
    link = _storage(app).link
    return link.client


def _items(n: int, at: int, then: Callable[[], None]) -> Iterator[list[int]]:
    """Items ``[0]..[n-1]``; ``then`` runs just before item ``at`` is handed out."""
    for i in range(n):
        if i == at:
            then()
        yield [i]


def _wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, "condition not reached in 30 s"
        time.sleep(0.005)


def _queued(app: Conveyor) -> list[int]:
    """The first argument of each pending job of the default queue, oldest first."""
    keys = _storage(app).keys.queue("default")
    raw = _raw(app)
    ids = raw.lrange(keys.pending, 0, -1)[::-1]
    statics = raw.hmget(keys.jobs, ids) if ids else []
    return [json.loads(json.loads(static)["p"])["a"][0] for static in statics]


def test_blocks_sent_ahead_are_stored_in_order(app: Conveyor) -> None:
    n = 5 * BLOCK_SIZE + 7
    refs = _fn(app).enqueue_many([[i] for i in range(n)])
    assert [r.created for r in refs] == [True] * n
    assert [r.id for r in refs] == sorted(r.id for r in refs)
    assert _queued(app) == list(range(n))  # FIFO, as the items came
    leased = app.storage.dequeue(["default"], "w", 3, 30)
    assert [j.id for j in leased] == [r.id for r in refs[:3]]


def test_a_block_redis_refuses_stops_the_call_and_nothing_after_it_is_sent(
        app: Conveyor) -> None:
    keys = _storage(app).keys.queue("default")
    raw = _raw(app)
    node: dict[str, Any] = {}
    if isinstance(raw, redis.RedisCluster):
        node["target_nodes"] = raw.get_node_from_key(keys.jobs)

    def refused() -> int:
        return int(raw.info("errorstats", **node).get("errorstat_WRONGTYPE", {}).get("count", 0))

    before = refused()

    def break_the_jobs_hash() -> None:
        # Blocks 0 and 1 are stored (block 1 was sent before block 2 was built): block 2's
        # call fails at its first command (HMGET of the jobs hash), before any write.
        _wait_until(lambda: raw.hlen(keys.state) == 2 * BLOCK_SIZE)
        raw.rename(keys.jobs, keys.jobs + ":aside")
        raw.set(keys.jobs, "not a hash")

    def mend_it() -> None:
        # Block 2's call has failed; whatever is sent from now on would be stored.
        _wait_until(lambda: refused() > before)
        raw.delete(keys.jobs)
        raw.rename(keys.jobs + ":aside", keys.jobs)

    def items() -> Iterator[list[int]]:
        yield from _items(3 * BLOCK_SIZE, 2 * BLOCK_SIZE, break_the_jobs_hash)
        yield from _items(2 * BLOCK_SIZE, 0, mend_it)

    with pytest.raises(StorageError, match="WRONGTYPE"):
        _fn(app).enqueue_many(items())
    assert raw.hlen(keys.state) == 2 * BLOCK_SIZE  # nothing of block 2, nor after it
    assert _queued(app) == list(range(2 * BLOCK_SIZE))


def test_a_flushed_script_cache_is_answered_by_sending_the_call_again(app: Conveyor) -> None:
    raw = _raw(app)
    keys = _storage(app).keys.queue("default")

    def flush_scripts() -> None:
        # Block 1 is stored and block 2 not yet sent: its call meets NOSCRIPT.
        _wait_until(lambda: raw.hlen(keys.state) == 2 * BLOCK_SIZE)
        raw.script_flush()  # on a Cluster, on every primary

    n = 4 * BLOCK_SIZE
    refs = _fn(app).enqueue_many(_items(n, 2 * BLOCK_SIZE, flush_scripts))
    assert len(refs) == n
    assert _queued(app) == list(range(n))


def test_a_batch_that_refuses_a_block_stops_the_call_before_it_is_queued(
        app: Conveyor) -> None:
    raw = _raw(app)
    keys = _storage(app).keys.queue("default")
    fn = _fn(app)
    batch = app.batch()
    with pytest.raises(BatchNotFound), batch:  # closing it finds it gone, too
        batch_key = _storage(app).keys.batch(batch.id).batch

        def delete_the_batch() -> None:
            _wait_until(lambda: raw.hlen(keys.state) == BLOCK_SIZE)
            raw.delete(batch_key)

        with pytest.raises(BatchNotFound):
            fn.enqueue_many(_items(4 * BLOCK_SIZE, BLOCK_SIZE, delete_the_batch))
    # Its jobs join the batch before they are queued: block 1 never got that far.
    assert _queued(app) == list(range(BLOCK_SIZE))
