"""Redis-specific behaviour of the storage, against real redis-server processes."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

import redis
from conveyor.core.clock import FakeClock, SystemClock
from conveyor.core.job import Ack, EventKind, FlowControl, JobSpec, JobState, Outcome
from conveyor.errors import StorageUnavailable
from conveyor.storage import Retention, open_storage
from conveyor.storage.redis.storage import RedisStorage, open_redis
from tests.redis.conftest import prefixed
from tests.support.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis


def job(job_id: str, queue: str = "default") -> JobSpec:
    """A small job."""
    return JobSpec(id=job_id, name="tests.noop", queue=queue, payload='{"a":[],"k":{}}')


def test_bulk_enqueue_of_100000_jobs_in_one_call(store: RedisStorage) -> None:
    results = store.enqueue([job(f"b{i:06d}") for i in range(100_000)])
    assert len(results) == 100_000 and all(r.created for r in results)
    assert store.count_jobs(state=JobState.PENDING, queue="default") == 100_000
    first = store.dequeue(["default"], "w", 3, 30)
    assert [j.id for j in first] == ["b000000", "b000001", "b000002"]


def test_password_url_and_acl_user_url() -> None:
    with RedisServer(password="s3cret-pw") as server:
        store = open_redis(prefixed(server.url))
        assert store.enqueue([job("a")])[0].created
        store.close()
        admin = redis.Redis.from_url(server.url)
        admin.acl_setuser("conveyor", enabled=True, passwords=["+user-pw"], keys=["*"],
                          commands=["+@all"], channels=["*"])
        admin.close()
        user_url = f"redis://conveyor:user-pw@127.0.0.1:{server.port}/0"
        user_store = open_storage(prefixed(user_url))
        assert user_store.enqueue([job("b")])[0].created
        user_store.close()


def test_wrong_password_is_a_clear_error_without_the_password() -> None:
    with RedisServer(password="right-pw") as server:
        url = f"redis://:very-secret-guess@127.0.0.1:{server.port}/0"
        with pytest.raises(StorageUnavailable) as info:
            open_redis(url)
        text = str(info.value)
        assert "very-secret-guess" not in text and "127.0.0.1" in text


def test_unreachable_redis_is_storage_unavailable_without_the_password() -> None:
    url = f"redis://user:hidden-pw@127.0.0.1:{free_port()}/0"
    with pytest.raises(StorageUnavailable) as info:
        open_redis(url)
    assert "unreachable" in str(info.value) and "hidden-pw" not in str(info.value)


def test_restart_with_aof_always_keeps_every_acknowledged_enqueue() -> None:
    with RedisServer(appendonly=True, appendfsync="always") as server:
        store = open_redis(prefixed(server.url))
        ids = [r.id for r in store.enqueue([job(f"a{i}") for i in range(500)])]
        ids += [store.enqueue([job(f"s{i}")])[0].id for i in range(50)]
        server.kill()  # no graceful flush: only what was fsynced survives
        server.start()
        assert store.count_jobs(state=JobState.PENDING, queue="default") == len(ids)
        leased = store.dequeue(["default"], "w", 1000, 30)
        assert sorted(j.id for j in leased) == sorted(ids)
        store.close()


def test_a_stale_worker_cannot_acknowledge(faked: RedisStorage, clock: FakeClock,
                                           caplog: pytest.LogCaptureFixture) -> None:
    faked.enqueue([job("a")])
    stale = faked.dequeue(["default"], "w1", 1, 10)[0]
    clock.advance(11)
    assert faked.reclaim_expired() == 1
    fresh = faked.dequeue(["default"], "w2", 1, 10)[0]
    assert fresh.token != stale.token
    with caplog.at_level(logging.WARNING, logger="conveyor.storage.redis"):
        assert faked.ack([Ack("a", stale.token, Outcome.FAILED)]) == [False]
    assert any("refused" in r.getMessage() for r in caplog.records)
    record = faked.get_job("a")
    assert record is not None and record.state is JobState.ACTIVE and record.worker == "w2"
    assert record.events is not None and record.events[-1].kind == EventKind.ACK_REFUSED
    assert faked.ack([Ack("a", fresh.token, Outcome.SUCCEEDED)]) == [True]


def test_an_active_job_that_lost_its_lease_entry_is_recovered(
        faked: RedisStorage, clock: FakeClock, redis_server: Any) -> None:
    faked.enqueue([job("a")])
    faked.dequeue(["default"], "w1", 1, 10)
    client = redis.Redis.from_url(redis_server.url)
    client.delete(faked.keys.queue("default").active)  # as eviction or a stale restore would
    client.close()
    assert faked.reclaim_expired() == 0  # its lease has not expired yet: put back in the index
    clock.advance(11)
    assert faked.reclaim_expired() == 1
    assert faked.get_job("a").state is JobState.PENDING  # type: ignore[union-attr]


def test_eviction_policy_warning() -> None:
    with RedisServer(extra=["--maxmemory-policy", "allkeys-lru"]) as server:
        store = open_redis(prefixed(server.url))
        warnings = store.check_server()
        assert len(warnings) == 1 and "noeviction" in warnings[0]
        store.close()
    with RedisServer() as server:
        store = open_redis(prefixed(server.url))
        assert store.check_server() == []
        store.close()


def test_wait_wakes_on_enqueue(store: RedisStorage) -> None:
    other = open_redis(store.url)
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(store.wait(["default"], 10.0)))
    waiter.start()
    time.sleep(0.1)  # let the waiter block; the assertion does not depend on timing
    other.enqueue([job("a")])
    waiter.join(timeout=10)
    assert woke == [True]
    other.close()


def test_wait_times_out_without_work(store: RedisStorage) -> None:
    assert store.wait(["empty"], 0.05) is False


def test_wait_and_enqueue_survive_a_redis_restart() -> None:
    with RedisServer(appendonly=True, appendfsync="always") as server:
        store = open_redis(prefixed(server.url))
        store.enqueue([job("a")])
        server.restart()
        assert store.wait(["nothing"], 0.05) is False  # reconnects quietly
        assert store.enqueue([job("b")])[0].created
        assert {j.id for j in store.dequeue(["default"], "w", 5, 30)} == {"a", "b"}
        store.close()


def test_an_ack_is_retried_through_a_restart_not_dropped() -> None:
    with RedisServer(appendonly=True, appendfsync="always") as server:
        store = open_redis(prefixed(server.url))
        store.enqueue([job("a")])
        leased = store.dequeue(["default"], "w", 1, 60)[0]
        server.kill()
        restarter = threading.Timer(0.3, server.start)
        restarter.start()
        assert store.ack([Ack("a", leased.token, Outcome.SUCCEEDED)]) == [True]
        restarter.join()
        assert store.get_job("a").state is JobState.SUCCEEDED  # type: ignore[union-attr]
        store.close()


def test_pending_pages_cover_parked_and_listed_jobs_oldest_first(store: RedisStorage) -> None:
    limited = FlowControl(concurrency_key="k", concurrency_limit=1)
    store.enqueue([JobSpec(id=f"j{i}", name="t", queue="q", payload="{}",
                           flow=limited if i < 4 else None) for i in range(10)])
    leased = store.dequeue(["q"], "w", 3, 30)  # j1..j3 wait in the parked set
    assert [j.id for j in leased] == ["j0", "j4", "j5"]
    expected = ["j1", "j2", "j3", "j6", "j7", "j8", "j9"]
    assert store.count_jobs(state=JobState.PENDING, queue="q") == len(expected)
    for offset in range(len(expected)):
        for limit in range(1, 5):
            page = store.list_jobs(state=JobState.PENDING, queue="q", offset=offset, limit=limit)
            assert [r.id for r in page] == expected[offset:offset + limit]


def test_the_system_clock_does_not_replace_the_server_clock(redis_server: Any) -> None:
    store = open_redis(prefixed(redis_server.url), SystemClock())
    assert store.ctx.now_arg() == ""  # scripts read the server's TIME
    store.close()


def test_short_lived_threads_do_not_use_up_connections(store: RedisStorage) -> None:
    # redis-py allows 100 connections per pool; idle ones must be reused, not leaked.
    for i in range(150):
        thread = threading.Thread(target=store.enqueue, args=([job(f"t{i}")],))
        thread.start()
        thread.join()
    assert store.count_jobs(state=JobState.PENDING, queue="default") == 150


def test_trim_releases_stale_unique_locks(faked: RedisStorage, clock: FakeClock,
                                          redis_server: Any) -> None:
    spec = JobSpec(id="u1", name="t", queue="q", payload="{}",
                   flow=FlowControl(unique_key="report", unique_for=5))
    faked.enqueue([spec])
    (leased,) = faked.dequeue(["q"], "w", 1, 30)
    assert faked.ack([Ack("u1", leased.token, Outcome.SUCCEEDED)]) == [True]
    clock.advance(10)
    assert faked.trim(Retention(succeeded_seconds=1)) == 1
    client = redis.Redis.from_url(redis_server.url)
    assert client.hlen(faked.keys.queue("q").unique) == 0
    client.close()
