"""Pending jobs missing from their queue's pending list are put back (issue #14, item 2).

Jobs are stranded for real: their list entries are removed with raw ``LREM``/``LPOP``, as an
earlier version's failing ``dequeue.lua`` or an operator's redis-cli left them. The repair
pass (``storage/redis/repair.py``, advanced by ``reclaim_expired``) must put each one back
exactly once, and never push a job whose entry is in the list or that someone else pushed
meanwhile. On one server and on Cluster.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from conveyor.core.ids import new_id
from conveyor.core.job import Ack, FlowControl, JobSpec, JobState, Outcome
from conveyor.storage.redis.storage import RedisStorage, open_redis
from tests.redis.conftest import prefixed

Q = "default"
PAYLOAD = '{"a":[],"k":{},"m":{}}'
MESSAGE = "was pending but missing from its queue's list; put back"


@pytest.fixture(params=["redis_server", "redis_cluster"])
def store(request: pytest.FixtureRequest) -> Iterator[RedisStorage]:
    """A storage with its own prefix on the session's server, or on the local Cluster."""
    storage = open_redis(prefixed(request.getfixturevalue(request.param).url))
    yield storage
    storage.close()


def _enqueue(store: RedisStorage, n: int, flow: FlowControl | None = None) -> list[str]:
    specs = [JobSpec(id=new_id(), name="t.job", queue=Q, payload=PAYLOAD, flow=flow)
             for _ in range(n)]
    store.enqueue(specs)
    return [s.id for s in specs]


def _list(store: RedisStorage) -> list[str]:
    return list(store.link.call("LRANGE", store.keys.queue(Q).pending, 0, -1))


def _strand(store: RedisStorage, job_id: str) -> None:
    assert store.link.call("LREM", store.keys.queue(Q).pending, 0, job_id) == 1


def _pending_records(store: RedisStorage) -> set[str]:
    """Ids whose state entry says pending (what a full listing of the records shows)."""
    cursor, out = "0", set()
    while True:
        cursor, page = store.link.call("HSCAN", store.keys.queue(Q).state, cursor,
                                       "COUNT", 1000)
        items = page.items() if isinstance(page, dict) else zip(page[::2], page[1::2],
                                                                strict=True)
        out |= {i for i, raw in items if raw.startswith("pending\t")}
        if str(cursor) == "0":
            return out


def _run_pass(store: RedisStorage) -> int:
    """One whole pass over the queue, step by step, as the recoverer would."""
    store.repair.start(Q)
    put_back = 0
    while store.repair.running(Q):
        put_back += store.repair.step(Q)
    return put_back


def _drain(store: RedisStorage) -> Counter[str]:
    """Lease and succeed everything that can be leased; how often each id was leased."""
    leased: Counter[str] = Counter()
    while jobs := store.dequeue([Q], "w", 1000, 60.0):
        leased.update(j.id for j in jobs)
        assert all(store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs]))
    return leased


def test_stranded_jobs_are_put_back_once_and_run_once(store: RedisStorage) -> None:
    ids = _enqueue(store, 5000)
    store.repair.grace = 0.0
    # Three stranded (oldest, middle, newest entry), and five cancelled: their entries stay
    # in the list, counted by "stale", so the list holds 5,000 - 3 entries.
    pending_key = store.keys.queue(Q).pending
    stranded = [store.link.call("RPOP", pending_key), ids[2500],
                store.link.call("LPOP", pending_key)]
    _strand(store, ids[2500])
    cancelled = ids[100:105]
    for job_id in cancelled:
        assert store.cancel(job_id) is JobState.CANCELLED
    waiting = set(ids) - set(cancelled)
    assert _pending_records(store) == waiting
    assert store.count_jobs(state=JobState.PENDING, queue=Q) == len(waiting) - 3  # disagree

    assert _run_pass(store) == 3
    entries = _list(store)
    assert len(entries) == 5000 and len(set(entries)) == 5000  # each job's entry once
    assert store.count_jobs(state=JobState.PENDING, queue=Q) == len(waiting)
    for job_id in stranded:
        record = store.get_job(job_id)
        assert record is not None and record.state is JobState.PENDING
        assert [e.message for e in record.events or [] if e.kind == "recovered"] == [MESSAGE]
    assert _run_pass(store) == 0  # nothing more is missing

    leased = _drain(store)
    assert set(leased) == waiting and set(leased.values()) == {1}
    assert store.count_jobs(state=JobState.PENDING, queue=Q) == 0


def test_young_jobs_are_left_alone(store: RedisStorage) -> None:
    """A job made pending less than ``grace`` before the pass may be being pushed right now:
    it waits for a later pass."""
    ids = _enqueue(store, 10)
    _strand(store, ids[4])
    assert _run_pass(store) == 0  # default grace: 60 s
    store.repair.grace = 0.0
    assert _run_pass(store) == 1
    assert sorted(_list(store)) == sorted(ids)


def test_recoverer_ticks_run_one_pass_per_interval_fleet_wide(store: RedisStorage) -> None:
    """``reclaim_expired`` starts a pass when due and advances it; a second worker's storage
    does not start another while the first one's repair key lives."""
    ids = _enqueue(store, 3000)
    for job_id in ids[:2]:
        _strand(store, job_id)
    other = open_redis(store.url)
    try:
        for s in (store, other):
            s.repair.grace = 0.0
            s.repair.every = 60.0
        ticks = 0
        while True:
            store.reclaim_expired()
            other.reclaim_expired()
            ticks += 1
            assert not other.repair.running(Q)
            if not store.repair.running(Q):
                break
        assert Counter(_list(store)) == Counter(ids)
        store.reclaim_expired()  # not due again for 60 s
        assert not store.repair.running(Q)
    finally:
        other.close()


def test_the_put_back_rechecks_atomically(store: RedisStorage) -> None:
    """``repair.lua`` pushes a candidate only if it is still pending with the pending-since
    stamp the pass read, and not parked: a job pushed again in between (here: cancelled and
    retried) or already in the list is never pushed twice."""
    ids = _enqueue(store, 5)
    qk = store.keys.queue(Q)

    def stamp(job_id: str) -> str:
        return str(store.link.call("HGET", qk.state, job_id).split("\t")[10])

    def repair(job_id: str, seen: str) -> int:
        return int(store.scripts.run("repair", qk,
                                     [store.ctx.now_arg(), Q, job_id, seen]))

    _strand(store, ids[0])
    seen = stamp(ids[0])
    assert store.cancel(ids[0]) is JobState.CANCELLED
    assert store.retry_jobs([ids[0]]) == 1  # pushed again, with a new stamp
    assert stamp(ids[0]) != seen
    assert repair(ids[0], seen) == 0
    assert _list(store).count(ids[0]) == 1

    _strand(store, ids[1])
    seen = stamp(ids[1])
    assert repair(ids[1], seen) == 1
    assert repair(ids[1], seen) == 0  # a call run twice (a retry after a lost reply)
    assert _list(store).count(ids[1]) == 1

    _strand(store, ids[2])  # parked by flow control meanwhile: not missing
    store.link.call("ZADD", qk.parked, 1, ids[2])
    assert repair(ids[2], stamp(ids[2])) == 0
    assert ids[2] not in _list(store)


def test_parked_jobs_are_not_missing(store: RedisStorage) -> None:
    """Jobs held back by flow control wait in the parked set, not the list: still pending,
    not stranded."""
    _enqueue(store, 20, FlowControl(concurrency_key="k", concurrency_limit=1))
    store.repair.grace = 0.0
    (first,) = store.dequeue([Q], "w", 5, 60.0)
    parked = set(store.link.call("ZRANGE", store.keys.queue(Q).parked, 0, -1))
    assert parked and first.id not in parked
    assert _run_pass(store) == 0
    assert len(_list(store)) + len(parked) == 19


def test_concurrent_pushes_and_pops_are_never_duplicated(store: RedisStorage) -> None:
    """Passes run while another client enqueues, leases and acknowledges: every job is
    leased exactly once, the stranded ones included, and no pass pushes a job twice."""
    store.repair.grace = 0.0
    first = _enqueue(store, 2000)
    stranded = first[::400]
    for job_id in stranded:
        _strand(store, job_id)
    worker = open_redis(store.url)
    leased: Counter[str] = Counter()
    added: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            while not stop.is_set():
                added.extend(_enqueue(worker, 50))
                jobs = worker.dequeue([Q], "w", 60, 60.0)
                leased.update(j.id for j in jobs)
                assert all(worker.ack([Ack(j.id, j.token, Outcome.SUCCEEDED)
                                       for j in jobs]))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        put_back = sum(_run_pass(store) for _ in range(3))
    finally:
        stop.set()
        thread.join()
        worker.close()
    assert not errors, errors
    assert put_back <= len(stranded)  # some may have been put back... only once each
    assert max(Counter(_list(store)).values(), default=1) == 1
    put_back += _run_pass(store)
    leased += _drain(store)
    everything = set(first) | set(added)
    assert set(leased) == everything and set(leased.values()) == {1}
    assert put_back == len(stranded)
