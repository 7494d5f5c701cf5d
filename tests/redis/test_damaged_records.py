"""Damaged records on Redis (issue #14, items 2, 3 and 6): written for real with raw HSETs of
truncated, non-UTF-8 or incomplete entries, on one server and on Cluster.

One damaged job harms only itself: it is leased alone, ends dead as "unreadable: <why>", and
every job fetched beside it runs; operators can list, show, kill, retry and delete it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor.app import Conveyor
from conveyor.core.job import Ack, JobState, LeasedJob
from conveyor.storage.redis.storage import RedisStorage, open_redis
from conveyor.worker.processor import Processor
from tests.redis.conftest import prefixed

Damage = Callable[[RedisStorage, str, str], None]


def _raw(store: RedisStorage) -> Any:
    return store.link.client  # bytes written through it reach Redis unchanged


def _set_state(store: RedisStorage, queue: str, job_id: str, cut: Callable[[bytes], bytes]
               ) -> None:
    key = store.keys.queue(queue).state
    _raw(store).hset(key, job_id, cut(_raw(store).hget(key, job_id).encode()))


def _set_static(store: RedisStorage, queue: str, job_id: str, value: bytes | None) -> None:
    key = store.keys.queue(queue).jobs
    if value is None:
        _raw(store).hdel(key, job_id)
    else:
        _raw(store).hset(key, job_id, value)


DAMAGES: dict[str, tuple[Damage, str]] = {
    "state truncated": (
        lambda s, q, i: _set_state(s, q, i, lambda raw: raw[:12]), "state entry truncated"),
    "state not UTF-8, no known state": (
        lambda s, q, i: _set_state(s, q, i, lambda raw: b"\xffend" + raw[7:]), "state entry"),
    "job record truncated": (
        lambda s, q, i: _set_static(s, q, i, b'{"n":"tests.redis.test_damaged_records.ok","q'),
        "not JSON"),
    "job record not UTF-8": (
        lambda s, q, i: _set_static(s, q, i, b'{"n":"\xff\xfe","q":"default","p":"{}","m":1}'),
        "not valid UTF-8"),
    "job record lacks its payload": (
        lambda s, q, i: _set_static(s, q, i, b'{"n":"x","q":"default","m":1}'), "payload"),
    "job record missing": (lambda s, q, i: _set_static(s, q, i, None), "job record missing"),
}


@pytest.fixture(params=["redis_server", "redis_cluster"])
def url(request: pytest.FixtureRequest) -> str:
    """A fresh prefix on the session's server, or on the local Cluster."""
    return prefixed(request.getfixturevalue(request.param).url)


@pytest.fixture
def app(url: str) -> Iterator[Conveyor]:
    """An app with one job function and one flow-controlled one, on its own storage."""
    app = Conveyor(url)
    app.job(name="tests.redis.test_damaged_records.ok")(ok)
    app.job(name="tests.redis.test_damaged_records.limited", concurrency=50)(ok)
    yield app
    app.close()


def ok(n: int) -> int:
    """The job every healthy sibling runs."""
    return n


def _store(app: Conveyor) -> RedisStorage:
    store = app.storage
    assert isinstance(store, RedisStorage)
    return store


def _run_fetch(app: Conveyor, jobs: list[LeasedJob]) -> None:
    """What a worker does with one fetch: prepare, run and acknowledge each job."""
    processor = Processor(app, "w", app.clock)
    acks = []
    for job in jobs:
        prepared = processor.prepare(job)
        acks.append(prepared if isinstance(prepared, Ack) else processor.run(prepared))
    assert all(_store(app).ack(acks))


@pytest.mark.parametrize("flow", [False, True], ids=["plain", "flow-controlled"])
@pytest.mark.parametrize("damage", list(DAMAGES), ids=list(DAMAGES))
def test_a_damaged_job_dies_alone_and_its_siblings_run(app: Conveyor, damage: str,
                                                       flow: bool) -> None:
    name = "limited" if flow else "ok"
    fn = app.registry.get(f"tests.redis.test_damaged_records.{name}")
    assert fn is not None
    refs = [fn.enqueue(n) for n in range(20)]
    ids = [r.id for r in refs if r is not None]
    store = _store(app)
    hurt, why = DAMAGES[damage]
    hurt(store, "default", ids[7])

    jobs = store.dequeue(["default"], "w", 50, 60.0)
    assert sorted(j.id for j in jobs) == sorted(ids)  # nothing stranded by the damage
    unreadable = {j.id: j.unreadable for j in jobs if j.unreadable}
    assert list(unreadable) == [ids[7]] and why in str(unreadable[ids[7]])
    _run_fetch(app, jobs)

    for job_id in ids:
        record = store.get_job(job_id)
        assert record is not None
        if job_id == ids[7]:
            assert record.state is JobState.DEAD
            assert record.message is not None and record.message.startswith("unreadable: ")
            assert why in record.message
        else:
            assert record.state is JobState.SUCCEEDED, record
    (stats,) = store.queues()
    assert (stats.pending, stats.active, stats.dead) == (0, 0, 1)


def _damaged_terminal(app: Conveyor, damage: str) -> tuple[RedisStorage, str, list[str]]:
    """Ten finished jobs, one of which is then damaged."""
    fn = app.registry.get("tests.redis.test_damaged_records.ok")
    assert fn is not None
    ids = [r.id for r in (fn.enqueue(n) for n in range(10)) if r is not None]
    store = _store(app)
    _run_fetch(app, store.dequeue(["default"], "w", 50, 60.0))
    DAMAGES[damage][0](store, "default", ids[3])
    return store, ids[3], ids


@pytest.mark.parametrize("damage", list(DAMAGES), ids=list(DAMAGES))
def test_operators_see_and_remove_a_damaged_job(app: Conveyor, damage: str) -> None:
    store, bad, ids = _damaged_terminal(app, damage)
    why = DAMAGES[damage][1]

    record = store.get_job(bad)
    assert record is not None and why in str(record.unreadable)
    assert record.as_dict()["unreadable"] == record.unreadable
    listed = {r.id: r for r in store.list_jobs(queue="default", limit=100, with_events=True)}
    assert set(listed) == set(ids) and why in str(listed[bad].unreadable)
    assert all(r.unreadable is None for i, r in listed.items() if i != bad)
    by_state = store.list_jobs(state=JobState.SUCCEEDED, queue="default", limit=100)
    assert bad in {r.id for r in by_state} or record.state is not JobState.SUCCEEDED
    assert store.count_jobs(queue="default") == 10

    store.kill_jobs([bad])  # a finished job is not killed; the call must not fail
    assert store.delete_jobs([bad]) == 1
    assert store.get_job(bad) is None
    assert {r.id for r in store.list_jobs(queue="default", limit=100)} == set(ids) - {bad}


@pytest.mark.parametrize("damage", ["job record truncated", "job record not UTF-8"])
def test_a_damaged_job_retried_by_hand_dies_again_with_its_reason(app: Conveyor,
                                                                  damage: str) -> None:
    fn = app.registry.get("tests.redis.test_damaged_records.ok")
    assert fn is not None
    ref = fn.enqueue(1)
    assert ref is not None
    store = _store(app)
    DAMAGES[damage][0](store, "default", ref.id)
    for _ in range(2):
        (job,) = store.dequeue(["default"], "w", 10, 60.0)
        assert job.id == ref.id and job.unreadable is not None
        _run_fetch(app, [job])
        record = store.get_job(ref.id)
        assert record is not None and record.state is JobState.DEAD
        assert store.retry_jobs([ref.id]) == 1  # allowed: it only dies again, with its reason


def test_a_pending_job_in_no_known_state_can_be_killed_or_cancelled(app: Conveyor) -> None:
    fn = app.registry.get("tests.redis.test_damaged_records.ok")
    assert fn is not None
    ids = [r.id for r in (fn.enqueue(n) for n in range(3)) if r is not None]
    store = _store(app)
    hurt = DAMAGES["state not UTF-8, no known state"][0]
    hurt(store, "default", ids[0])
    hurt(store, "default", ids[1])
    assert store.kill_jobs([ids[0]]) == 1
    assert store.cancel(ids[1]) is JobState.CANCELLED
    states = {i: r.state for i in ids if (r := store.get_job(i)) is not None}
    assert states == {ids[0]: JobState.DEAD, ids[1]: JobState.CANCELLED,
                      ids[2]: JobState.PENDING}
    assert [j.id for j in store.dequeue(["default"], "w", 10, 60.0)] == [ids[2]]


def test_damaged_result_event_log_and_message_are_shown(app: Conveyor) -> None:
    store, bad, _ = _damaged_terminal(app, "state truncated")
    qk = store.keys.queue("default")
    good = next(r.id for r in store.list_jobs(queue="default") if r.id != bad)
    raw = _raw(store)
    raw.hset(qk.results, good, b"{\"trunc")
    raw.hset(qk.messages, good, b"bad \xff byte")
    state = raw.hget(qk.state, good).encode("utf-8", "surrogateescape")
    raw.hset(qk.state, good, state + b'{"t":1,"k":"message","m":"\xc3"}\n')
    record = store.get_job(good)
    assert record is not None and "result" in str(record.unreadable)
    assert record.as_dict()["result"] is None
    # the byte that is not UTF-8 is read back as a lone surrogate, made storable text (U+FFFD)
    assert any(e.message and "\ufffd" in e.message for e in record.events or [])


def test_admin_scripts_leave_no_stale_count_behind(url: str) -> None:
    store = open_redis(url)
    app = Conveyor(storage=store)
    try:
        fn = app.job(name="tests.redis.test_damaged_records.ok")(ok)
        ids = [r.id for r in (fn.enqueue(n) for n in range(10)) if r is not None]
        assert store.cancel(ids[0]) is JobState.CANCELLED
        assert store.kill_jobs(ids[1:3]) == 2
        assert store.delete_jobs(ids[3:5]) == 2
        (stats,) = store.queues()
        assert stats.pending == 5
        assert {r.id for r in store.list_jobs(state=JobState.PENDING, queue="default")} == set(
            ids[5:])
        assert store.retry_jobs([ids[0]]) == 1  # back in the list beside its stale entry
        assert store.queues()[0].pending == 6
        leased = store.dequeue(["default"], "w", 50, 60.0)
        assert sorted(j.id for j in leased) == sorted([ids[0], *ids[5:]])
        assert store.queues()[0].pending == 0
        assert store.dequeue(["default"], "w", 50, 60.0) == []
        assert int(store.link.call("HGET", store.keys.queue("default").meta, "stale")) == 0
    finally:
        app.close()
        store.close()
