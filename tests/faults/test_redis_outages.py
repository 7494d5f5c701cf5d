"""Scenarios 3 and 4: Redis crashes and restarts from its AOF, and Redis unreachable for 10 s.

Every acknowledged enqueue runs after the restart, workers survive the outage and resume
within about 2 s of Redis coming back, and nothing is lost. Each test runs its own
redis-server so it can crash, stop or pause it.
"""

from __future__ import annotations

import time

import pytest

import redis
from conveyor.app import Conveyor
from conveyor.core.job import EventKind
from tests.faults.checks import (
    Producer,
    all_working,
    assert_batch_exact,
    describe,
    drained,
    enqueue_batch,
    states,
    wait_batch,
)
from tests.faults.conftest import Faults
from tests.faults.harness import report, wait_until
from tests.support.redis_server import RedisServer, redis_server_binary

pytestmark = pytest.mark.skipif(redis_server_binary() is None, reason="needs redis-server")

LEASE = 3.0
OUTAGE = 6.0  # twice the lease: every lease held when it went away runs out during it
RESUME_BOUND = 2.0 + 2.0  # the 2 s promise plus slack for a loaded machine


@pytest.mark.slow
@pytest.mark.parametrize("aof_server", ["always", "everysec"], indirect=True)
def test_redis_crash_keeps_every_acknowledged_enqueue(
    aof_server: RedisServer, faults: Faults
) -> None:
    """Producer and 2 workers running; redis-server is SIGKILLed, restarted from its AOF 2 s
    later; every enqueue that returned before the crash runs."""
    url = f"{aof_server.url}?prefix=aof"
    app, jobs = faults.client(url)
    workers = [faults.worker(url, name=f"w{i}", lease=LEASE) for i in range(2)]
    producer = Producer(jobs["faults.work"])
    producer.start()
    wait_until(lambda: faults.log.starts() > 100 and all_working(faults.log, workers), 60,
               what="work to flow through every worker")
    crashed_at = time.time()
    aof_server.kill()
    time.sleep(2.0)
    aof_server.start()
    back_at = time.time()
    # Jobs run again and enqueues return again (a figure, not a wait of fixed length): then
    # the producer stops, and every enqueue it saw return must run.
    wait_until(lambda: faults.log.first_start_after(back_at) is not None
               and any(at > back_at for _, at in list(producer.acked)), 30, interval=0.02,
               what="jobs to run and enqueues to return again")
    producer.halt.set()
    producer.join(timeout=30)
    resumed = faults.log.first_start_after(back_at)

    wait_until(lambda: drained(app), 60, interval=0.2, what="every job to finish")
    acked = dict(producer.acked)
    before_crash = [job_id for job_id, at in producer.acked if at < crashed_at]
    found = states(app, before_crash)
    lost = [job_id for job_id in before_crash if app.storage.get_job(job_id) is None]
    if aof_server.appendfsync == "always":
        assert found == {"succeeded": len(before_crash)}, found
    else:
        # everysec: a crash of the Redis process alone loses nothing (the data is in the
        # kernel); only an OS crash could lose up to ~1-2 s of acknowledged writes.
        assert all(acked[job_id] > crashed_at - 2.0 for job_id in lost)
        assert found.get("succeeded", 0) + len(lost) == len(before_crash), found
    assert states(app, acked) == {"succeeded": len(acked)}
    assert all(w.alive() for w in workers), "a worker died with Redis"
    assert resumed is not None and resumed - back_at < RESUME_BOUND
    report(
        f"3 Redis kill -9 + AOF {aof_server.appendfsync}", "redis", acked=len(acked),
        acked_before_crash=len(before_crash), lost=len(lost),
        refused_while_down=len(producer.refused), resumed_after_s=resumed - back_at,
    )


def _first_lease(app: Conveyor, job_id: str) -> float:
    rec = app.get_job(job_id)
    assert rec is not None
    return min(e.ts for e in rec.events or () if e.kind == EventKind.STARTED)


def _pause(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    client.client_pause(int(OUTAGE * 1000), all=True)
    client.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stop", "pause"])
def test_workers_survive_redis_unreachable(
    how: str, aof_server: RedisServer, faults: Faults
) -> None:
    """Redis stopped (SHUTDOWN, AOF kept) or frozen (``CLIENT PAUSE ALL``) for 6 s in the
    middle of a batch: the workers stay up, resume, and the batch finishes exact."""
    url = f"{aof_server.url}?prefix=outage"
    app, jobs = faults.client(url)
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(20,)] * 1500, f"outage {how}")
    workers = [faults.worker(url, name=f"w{i}", lease=LEASE) for i in range(2)]
    wait_until(lambda: faults.log.starts() > 150 and all_working(faults.log, workers), 60,
               what="work to flow through every worker")
    down_at = time.time()
    if how == "stop":
        aof_server.stop()
        time.sleep(OUTAGE)
        aof_server.start()
    else:
        _pause(aof_server)
        time.sleep(OUTAGE)
    back_at = time.time()
    resumed = wait_until(lambda: faults.log.first_start_after(back_at), 30, interval=0.05,
                         what="processing to resume")

    _, done_at = wait_batch(app, batch_id, timeout=90)
    assert states(app, ids) == {"succeeded": len(ids)}
    assert_batch_exact(app, batch_id, {"succeeded": len(ids)})
    assert all(w.alive() for w in workers), "a worker died during the outage"
    runs = faults.log.executions()
    twice = [job_id for job_id in ids if len(runs.get(job_id, [])) > 1]
    # A second run only for jobs leased before Redis went away (the lease ran out meanwhile);
    # never for a job first leased after Redis came back.
    late = [job_id for job_id in twice if _first_lease(app, job_id) >= back_at]
    assert late == [], describe(app, late, runs, back_at)
    assert resumed - back_at < RESUME_BOUND
    report(
        f"4 Redis unreachable {OUTAGE:.0f} s ({how})", "redis", jobs=len(ids), lost=0,
        extra_runs=sum(len(runs[j]) - 1 for j in twice), resumed_after_s=resumed - back_at,
        drained_after_s=done_at - back_at, outage_s=back_at - down_at,
    )
