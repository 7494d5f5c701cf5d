"""Leases and schedules on Redis, Cluster and PostgreSQL opened as production opens them: no
test clock, so every time comes from the server's ``TIME`` / ``clock_timestamp()`` (the rest
of the suite runs a fake clock).

This process's own wall clock is moved an hour ahead for each test: were any lease, due time
or creation time taken from it, the checks below would be off by 3,600 s. Nothing here
depends on how long a step takes: bounds are read from the server before and after.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.client.periodic import CronConfig, CronScheduler, Schedule
from conveyor.core.job import Ack, JobState, Outcome
from conveyor.storage import Backend, open_storage
from tests.conformance.helpers import put, spec, take, worker_info

SKEW = 3600.0


_FIXTURES = {"redis": "redis_server", "redis_cluster": "redis_cluster",
             "postgres": "postgres_server"}


@pytest.fixture(params=["redis", "redis_cluster", "postgres"])
def server_clocked(request: pytest.FixtureRequest,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """A Redis (Cluster, PostgreSQL) store opened with no clock, in a process an hour fast."""
    server: Any = request.getfixturevalue(_FIXTURES[request.param])
    option = "schema" if request.param == "postgres" else "prefix"
    store = open_storage(f"{server.url}?{option}=sc{uuid.uuid4().hex[:10]}")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + SKEW)
    try:
        yield store
    finally:
        monkeypatch.undo()
        store.close()


def _server_now(store: Backend) -> float:
    return store.now()


class _ServerClock:
    """A clock that reads the server's ``TIME`` (through the store)."""

    def __init__(self, store: Backend) -> None:
        self.store = store

    def now(self) -> float:
        return self.store.now()


def test_the_store_reads_the_servers_clock_not_this_process(server_clocked: Backend) -> None:
    assert abs(_server_now(server_clocked) - (time.time() - SKEW)) < 600


def test_a_lease_is_set_and_expired_by_the_servers_clock(server_clocked: Backend) -> None:
    store = server_clocked
    job_id = put(store)
    before = _server_now(store)
    [job] = take(store, lease=0.5)
    after = _server_now(store)
    record = store.get_job(job_id)
    assert record is not None and record.lease_expires_at is not None
    assert before + 0.5 <= record.lease_expires_at <= after + 0.5
    while _server_now(store) <= record.lease_expires_at:
        time.sleep(0.05)
    assert store.reclaim_expired() == 1
    assert store.get_job(job_id).state is JobState.PENDING  # type: ignore[union-attr]
    # The old holder's ack is fenced out; the new holder's is taken.
    [again] = take(store, lease=60)
    assert store.ack([Ack(job.id, job.token, Outcome.SUCCEEDED)]) == [False]
    assert store.ack([Ack(again.id, again.token, Outcome.SUCCEEDED)]) == [True]


def test_a_long_lease_is_not_reclaimed_and_heartbeats_extend_it(server_clocked: Backend) -> None:
    store = server_clocked
    job_id = put(store)
    [job] = take(store, lease=60)
    assert store.reclaim_expired() == 0  # an hour of local skew must not expire it
    first = store.get_job(job_id).lease_expires_at  # type: ignore[union-attr]
    before = _server_now(store)
    reply = store.heartbeat(worker_info(_ServerClock(store)),  # type: ignore[arg-type]
                            {job.id: job.token}, 120)
    assert reply.lost == frozenset()
    extended = store.get_job(job_id).lease_expires_at  # type: ignore[union-attr]
    assert first is not None and extended is not None
    assert extended >= before + 120 > first


def test_due_times_are_judged_by_the_servers_clock(server_clocked: Backend) -> None:
    store = server_clocked
    now = _server_now(store)
    soon = store.enqueue([spec("later", run_at=now + 0.5)])[0].id
    future = store.enqueue([spec("later", run_at=now + 1800)])[0].id
    due = soon
    assert store.get_job(soon).state is JobState.SCHEDULED  # type: ignore[union-attr]
    while _server_now(store) <= now + 0.5:
        time.sleep(0.05)
    assert store.promote_due() == 1
    assert store.get_job(due).state is JobState.PENDING  # type: ignore[union-attr]
    assert store.get_job(future).state is JobState.SCHEDULED  # type: ignore[union-attr]


def test_schedules_are_created_and_ticked_on_the_servers_clock(server_clocked: Backend) -> None:
    store = server_clocked
    every_minute = Schedule("sc-minute", "* * * * *", "tests.ping", queue="cron")
    before = _server_now(store)
    scheduler = CronScheduler(store, _ServerClock(store), CronConfig(catch_up=300),
                              [every_minute])
    scheduler.register()
    after = _server_now(store)
    [info] = store.schedules()
    assert info.created_at is not None and before <= info.created_at <= after
    assert scheduler.tick() == 0  # nothing from before it existed, however far we look back


