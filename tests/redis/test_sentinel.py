"""The storage on a Sentinel-managed primary: found through the Sentinels, never writing to a
server that is not the primary, following a failover (scripts sent again to the new primary),
waiting for replicas when asked, and failing at open with one line that says why.

Real processes throughout (``tests/support/redis_sentinel.py``); the session's group is
shared, and the one test that fails the primary over starts its own.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

import redis
from conveyor import Conveyor
from conveyor.cli.main import main
from conveyor.core.ids import new_ids
from conveyor.core.job import JobSpec
from conveyor.errors import StorageUnavailable
from conveyor.storage import open_storage
from conveyor.storage.blocks import JobBlock
from conveyor.storage.redis.scripts import SCRIPTS
from conveyor.storage.redis.storage import RedisStorage
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.conftest import SENTINEL_DATA_SECRET, SENTINEL_SECRET
from tests.faults.harness import wait_until
from tests.support.redis_sentinel import RedisSentinelGroup
from tests.support.redis_server import RedisServer, free_port

SECRET = "Hunter2Secret"


def _open(group: RedisSentinelGroup, query: str = "") -> RedisStorage:
    url = group.url("&".join(filter(None, [f"prefix=s{uuid.uuid4().hex[:8]}", query])))
    storage = open_storage(url)
    assert isinstance(storage, RedisStorage)
    return storage


def _spec(queue: str = "default") -> JobSpec:
    return JobSpec(id=uuid.uuid4().hex, name="t.job", queue=queue, payload="{}")


def _replica(group: RedisSentinelGroup) -> RedisServer:
    port = group.primary_port()
    return next(s for s in group.servers if s.port != port and s.process is not None)


def test_open_finds_the_primary_through_the_sentinels(redis_sentinel: Any) -> None:
    storage = _open(redis_sentinel)
    try:
        assert storage.link.raw("ROLE")[0] == "master"
        storage.enqueue([spec := _spec()])
        assert storage.get_job(spec.id) is not None
    finally:
        storage.close()


def test_a_server_that_is_not_the_primary_is_never_used(
        redis_sentinel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Sentinel that still names a demoted primary: the ROLE check refuses the server."""
    storage = _open(redis_sentinel)
    replica = _replica(redis_sentinel)
    manager = storage.link.client.connection_pool.sentinel_manager  # type: ignore[attr-defined]
    storage.link.close()  # drop the connections already made to the real primary
    storage.link.closed = False
    monkeypatch.setattr(manager, "discover_master", lambda name: ("127.0.0.1", replica.port))
    try:
        with pytest.raises(StorageUnavailable, match="is a slave now, not the primary"):
            storage.link.call("PING", patience=0.3)
    finally:
        storage.close()


def test_readonly_is_a_reconnect_not_an_error(redis_sentinel: Any) -> None:
    """A connection whose server was demoted under it: the write is refused with READONLY,
    and goes through again on a new connection to the primary; the job is stored once."""
    storage = _open(redis_sentinel)
    try:
        storage.link.call("PING")
        (conn,) = storage.link._free[""]
        conn.disconnect()  # type: ignore[no-untyped-call]
        conn.host, conn.port = "127.0.0.1", _replica(redis_sentinel).port
        redis.Connection.connect(conn)  # type: ignore[no-untyped-call]  # to the replica, as it was
        assert storage.link.raw("ROLE")[0] == "slave"  # the demoted server, as the app sees it
        storage.enqueue([spec := _spec()])
        job = storage.get_job(spec.id)
        assert job is not None and job.state.value == "pending"
        assert storage.count_jobs() == 1
    finally:
        storage.close()


def test_wait_replicas_confirms_or_refuses(redis_sentinel: Any) -> None:
    storage = _open(redis_sentinel, "wait_replicas=2")
    too_many = _open(redis_sentinel, "wait_replicas=3&wait_timeout=0.1")
    try:
        storage.enqueue([spec := _spec()])
        for replica in (s for s in redis_sentinel.servers if s.port != storage.link.client
                        .connection_pool.get_master_address()[1]):  # type: ignore[attr-defined]
            copy = redis.Redis(port=replica.port, password=redis_sentinel.password,
                               decode_responses=True)
            assert copy.hexists(storage.keys.queue("default").jobs, spec.id)
            copy.close()
        with pytest.raises(StorageUnavailable, match="only 2 of 3 replicas confirmed"):
            too_many.enqueue([_spec()])
    finally:
        storage.close()
        too_many.close()


def test_a_bulk_block_waits_for_replicas_too(redis_sentinel: Any) -> None:
    # The bulk path writes its script call itself (storage/redis/pipeline.py); with
    # wait_replicas it must still wait for the replicas before the block counts as stored.
    plain = _open(redis_sentinel)
    too_many = _open(redis_sentinel, "wait_replicas=3&wait_timeout=0.1")
    try:
        def block() -> JobBlock:
            return JobBlock(name="t", queue="default", ids=new_ids(3), payloads=["[]"] * 3)
        plain.enqueue_block(block())  # enqueue.lua is in the server's cache: no NOSCRIPT
        with pytest.raises(StorageUnavailable, match="only 2 of 3 replicas confirmed"):
            too_many.enqueue_block(block())
    finally:
        plain.close()
        too_many.close()


def test_a_failover_is_followed_and_scripts_sent_again() -> None:
    """SENTINEL FAILOVER: the same storage object keeps working on the new primary, whose
    script cache is empty (NOSCRIPT, then the script is sent again), and the watch saw the
    switch."""
    with RedisSentinelGroup() as group:
        storage = _open(group)
        try:
            storage.enqueue([first := _spec()])
            old = group.primary_port()
            group.failover()
            port, _ = group.wait_failover(old)
            watch = storage.link.watch
            assert watch is not None
            wait_until(lambda: watch.switches > 0, 30, what="the watch to move the connections")
            new = redis.Redis(port=port, decode_responses=True)
            assert new.script_exists(SCRIPTS["dequeue"].sha) == [False]
            leased = storage.dequeue(["default"], "w1", 5, 30.0)
            assert [job.id for job in leased] == [first.id]
            assert new.script_exists(SCRIPTS["dequeue"].sha) == [True]
            assert storage.link.raw("ROLE")[0] == "master"
            new.close()
        finally:
            storage.close()


def test_wrong_primary_name_is_one_clear_line(redis_sentinel: Any,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    url = redis_sentinel.url().replace("/mymaster/", "/nosuch/")
    capsys.readouterr()
    assert main(["stats", "--url", url]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "no Sentinel watches a primary named 'nosuch' (they watch: 'mymaster')" in err


def test_unreachable_sentinels_are_one_line_without_secrets(
        capsys: pytest.CaptureFixture[str]) -> None:
    url = (f"redis+sentinel://:{SECRET}@127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
           f"/mymaster/0?sentinel_password={SECRET}")
    capsys.readouterr()
    assert main(["stats", "--url", url]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "no Sentinel answered" in err and SECRET not in err


def _banner(app: Conveyor) -> str:
    """What a worker on ``app`` logs as it starts and stops."""
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("conveyor.worker")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        launcher = Launcher(app, WorkerConfig(concurrency=1))
        launcher.start()
        launcher.stop(5)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return "\n".join(lines)


def test_no_password_shows_in_banner_repr_or_cli(redis_sentinel: Any,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The session's group has passwords on the data nodes and on the Sentinels."""
    url = redis_sentinel.url(f"prefix=s{uuid.uuid4().hex[:8]}")
    assert SENTINEL_DATA_SECRET in url and SENTINEL_SECRET in url
    app = Conveyor(url)
    try:
        banner = _banner(app)
        assert "starting: storage=redis+sentinel://:***@127.0.0.1:" in banner
        assert "sentinel_password=***" in banner
        capsys.readouterr()
        assert main(["stats", "--url", url]) == 0
        printed = capsys.readouterr()
        shown = banner + repr(app) + repr(app.storage) + printed.out + printed.err
        assert SENTINEL_DATA_SECRET not in shown and SENTINEL_SECRET not in shown
    finally:
        app.close()


def test_wrong_sentinel_password_is_one_line_without_it(
        redis_sentinel: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = redis_sentinel.url().replace(SENTINEL_SECRET, SECRET)
    capsys.readouterr()
    assert main(["stats", "--url", url]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert SECRET not in err and SENTINEL_DATA_SECRET not in err
