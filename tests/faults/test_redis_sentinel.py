"""Scenarios 20-23: the Redis primary lost under Sentinel, with real processes.

Each test starts its own group (one primary, two replicas, three ``redis-server --sentinel``
on loopback; the Sentinels judge a primary down after 1 s), a batch of 2,000 jobs, two
``conveyor worker`` processes and a producer enqueuing one job at a time, then:

20. SIGKILLs the primary (with and without ``wait_replicas=1``);
21. freezes it (SIGSTOP) until the Sentinels promote a replica, then lets it come back
    believing it is still the primary;
22. fails over by hand (``SENTINEL FAILOVER``) while it is healthy;
23. freezes both replicas, so that they fall behind, and then SIGKILLs the primary: what the
    durable option is for (with and without it).

Facts asserted: the batch counters equal a recount, every worker is still running, no enqueue
that returned is lost when the durable option covers the failure (and with it off, the loss
of 23 really happens), the old primary ends as a replica. Figures reported: jobs lost, extra
runs, seconds from the promotion (as the test sees it) to the first job started after it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor.app import Conveyor
from tests.faults import checks
from tests.faults.checks import Producer
from tests.faults.conftest import Faults
from tests.faults.harness import report, wait_until
from tests.support.redis_sentinel import RedisSentinelGroup
from tests.support.redis_server import RedisServer, redis_server_binary

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(redis_server_binary() is None, reason="needs redis-server")]

LEASE = 3.0
JOBS = 2000
# A call waiting on a frozen primary would wait for its socket timeout (30 s) without the
# +switch-master watch; resuming well inside that shows the watch moved it.
FROZEN_BOUND = 15.0


@pytest.fixture
def group() -> Iterator[RedisSentinelGroup]:
    """A private Sentinel-managed Redis that the scenario may break."""
    with RedisSentinelGroup() as started:
        yield started


def _url(group: RedisSentinelGroup, name: str, wait: int) -> str:
    return group.url(f"prefix={name}" + (f"&wait_replicas={wait}" if wait else ""))


def _start(faults: Faults, url: str, what: str) -> tuple[Conveyor, str, list[str], Producer]:
    """The batch, two workers and the producer, all running, each worker busy."""
    app, jobs = faults.client(url)
    batch_id, ids = checks.enqueue_batch(app, jobs["faults.work"], [(20,)] * JOBS, what)
    workers = [faults.worker(url, name=f"w{i}", lease=LEASE) for i in range(2)]
    producer = Producer(jobs["faults.work"])
    producer.start()
    wait_until(lambda: faults.log.starts() > 150 and checks.all_working(faults.log, workers), 90,
               what="work to flow through every worker")
    return app, batch_id, ids, producer


def _finish(faults: Faults, app: Conveyor, producer: Producer, after: float) -> list[str]:
    """Let the producer get enqueues through the new primary, stop it, let everything
    finish; returns the acknowledged enqueues that are missing from storage."""
    wait_until(lambda: any(at > after for _, at in producer.acked[-20:]), 60,
               what="enqueues to return again")
    producer.halt.set()
    producer.join(timeout=60)
    wait_until(lambda: checks.drained(app), 120, interval=0.2, what="every job to finish")
    acked = [job_id for job_id, _ in producer.acked]
    lost = [job_id for job_id in acked if app.storage.get_job(job_id) is None]
    kept = [job_id for job_id in acked if job_id not in set(lost)]
    assert checks.states(app, kept) == {"succeeded": len(kept)}
    return lost


def _extra_runs(faults: Faults, ids: list[str]) -> int:
    runs = faults.log.executions()
    return sum(len(runs.get(job_id, [])) - 1 for job_id in ids if runs.get(job_id))


def _longest_pause(faults: Faults, since: float) -> float:
    """The longest time between two job starts after ``since`` (the fault): how long
    processing stopped, wherever the test's own view of the promotion falls."""
    starts = sorted(line["t"] for line in faults.log.lines()
                    if line["s"] == "start" and line["t"] >= since - 1.0)
    return max((b - a for a, b in itertools.pairwise(starts)), default=0.0)


def _check_batch(faults: Faults, app: Conveyor, batch_id: str) -> None:
    checks.wait_batch(app, batch_id, timeout=120)
    checks.assert_batch_exact(app, batch_id, {"succeeded": JOBS})
    assert all(w.alive() for w in faults.workers), faults.outputs()


def _fail(group: RedisSentinelGroup, faults: Faults,
          fault: Callable[[RedisServer], object]) -> tuple[RedisServer, float, float, float]:
    """Strike the primary with ``fault``; returns it, the time of the fault, when the test saw
    the promotion, and the first job start after it."""
    old = group.primary()
    fault_at = time.time()
    fault(old)
    _, promoted_at = group.wait_failover(old.port)
    resumed = wait_until(lambda: faults.log.first_start_after(promoted_at), 60,
                         interval=0.02, what="processing to resume")
    return old, fault_at, promoted_at, resumed


def _report(scenario: str, faults: Faults, producer: Producer, ids: list[str],
            lost: list[str], times: tuple[float, float, float]) -> None:
    fault_at, promoted_at, resumed = times
    report(scenario, "redis_sentinel", acked=len(producer.acked), lost=len(lost),
           extra_runs=_extra_runs(faults, ids), refused=len(producer.refused),
           promoted_after_s=promoted_at - fault_at, resumed_after_s=resumed - promoted_at,
           longest_pause_s=_longest_pause(faults, fault_at))


@pytest.mark.parametrize("wait", [0, 1])
def test_primary_killed_during_a_batch(wait: int, group: RedisSentinelGroup,
                                       faults: Faults) -> None:
    """Scenario 20: kill -9 of the primary with workers and a producer running."""
    app, batch_id, ids, producer = _start(faults, _url(group, f"kill{wait}", wait),
                                          "sentinel kill")
    _, killed_at, promoted_at, resumed = _fail(group, faults, RedisServer.kill)
    lost = _finish(faults, app, producer, promoted_at)
    _check_batch(faults, app, batch_id)
    if wait:
        assert lost == []
    _report(f"20 Sentinel: primary kill -9 (wait {wait})", faults, producer, ids, lost,
            (killed_at, promoted_at, resumed))


def test_frozen_primary_comes_back_stale(group: RedisSentinelGroup, faults: Faults) -> None:
    """Scenario 21: the primary frozen past the failover, then back as a stale primary."""
    app, batch_id, ids, producer = _start(faults, _url(group, "stale", 1), "sentinel stale")
    old, frozen_at, promoted_at, resumed = _fail(group, faults, group.pause)
    group.resume(old)  # it still believes it is the primary until a Sentinel says otherwise
    wait_until(lambda: group.role(old) == "slave", 60, what="the stale primary to be demoted")
    lost = _finish(faults, app, producer, promoted_at)
    _check_batch(faults, app, batch_id)
    assert lost == []
    assert resumed - promoted_at < FROZEN_BOUND
    _report("21 Sentinel: primary frozen, back stale", faults, producer, ids, lost,
            (frozen_at, promoted_at, resumed))


# Without wait_replicas only: SENTINEL FAILOVER promotes a replica once it has caught up, so
# nothing acknowledged can be lost either way; scenario 20 runs the option through a failover.
@pytest.mark.parametrize("wait", [0])
def test_failover_by_hand(wait: int, group: RedisSentinelGroup, faults: Faults) -> None:
    """Scenario 22: ``SENTINEL FAILOVER`` while everything runs."""
    app, batch_id, ids, producer = _start(faults, _url(group, f"manual{wait}", wait),
                                          "sentinel manual")
    old, asked_at, promoted_at, resumed = _fail(group, faults, lambda _: group.failover())
    lost = _finish(faults, app, producer, promoted_at)
    _check_batch(faults, app, batch_id)
    assert lost == []
    # Sentinel reconfigures the healthy old primary at its next INFO round (up to 10 s):
    # waited for last, so the work above runs meanwhile instead of after it.
    wait_until(lambda: group.role(old) == "slave", 60, what="the old primary to be demoted")
    _report(f"22 Sentinel: SENTINEL FAILOVER (wait {wait})", faults, producer, ids, lost,
            (asked_at, promoted_at, resumed))


class _Big:
    """Enqueues of 128 KiB each (never run: no worker). A frozen replica's kernel still takes
    in what the primary sends until its socket buffers are full, so small writes would
    survive the primary; 1 s of these outgrows the buffers, and the rest waits in the
    primary's memory, as behind a slow or distant replica."""

    def __init__(self, job: Any) -> None:
        self.job = job

    def enqueue(self, *_: Any) -> Any:
        return self.job.enqueue("x" * 131072)


@pytest.mark.parametrize("wait", [0, 1])
def test_replicas_behind_when_the_primary_dies(wait: int, group: RedisSentinelGroup,
                                               faults: Faults) -> None:
    """Scenario 23: the replicas frozen (so behind) for 1 s, then the primary killed: the
    enqueues acknowledged meanwhile exist only on the dead primary, unless the client
    waited for a replica."""
    app, jobs = faults.client(_url(group, f"behind{wait}", wait))
    producer = Producer(_Big(jobs["faults.work"]))  # type: ignore[arg-type]
    producer.start()
    wait_until(lambda: len(producer.acked) > 20, 60, what="enqueues to flow")
    old = group.primary()
    replicas = [s for s in group.servers if s is not old]
    for server in replicas:
        group.pause(server)
    frozen_at = time.time()
    time.sleep(1.0)  # the length of the lag, not a synchronization
    old.kill()
    for server in replicas:
        group.resume(server)
    _, promoted_at = group.wait_failover(old.port)
    wait_until(lambda: any(at > promoted_at for _, at in producer.acked[-20:]), 60,
               what="enqueues to return again")
    producer.halt.set()
    producer.join(timeout=60)
    acked = list(producer.acked)
    lost = [job_id for job_id, _ in acked if app.storage.get_job(job_id) is None]
    during = [job_id for job_id, at in acked if frozen_at <= at <= promoted_at]
    if wait:
        assert lost == []
    else:
        assert lost, "the acknowledged enqueues of the lag should be gone with the primary"
    report(f"23 Sentinel: replicas 1 s behind (wait {wait})", "redis_sentinel",
           acked=len(acked), acked_while_behind=len(during), lost=len(lost),
           refused=len(producer.refused))
