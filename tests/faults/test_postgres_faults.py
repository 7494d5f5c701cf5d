"""Scenarios 16-19: PostgreSQL itself killed and restarted, worker connections terminated by
the server, four worker processes contending on one database, and statements cancelled by a
role's ``statement_timeout``. Workers survive each, nothing acknowledged is lost, and a job
runs twice only when a fault cut its run or its acknowledgement.

The crash runs a private server (it is killed); the others share the session's server, each
in a schema of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conveyor.storage.postgres.connection import parse_postgres_url
from tests.faults.checks import (
    Producer,
    all_working,
    assert_batch_exact,
    drained,
    enqueue_batch,
    states,
    wait_batch,
)
from tests.faults.conftest import Faults
from tests.faults.harness import report, wait_until
from tests.support.postgres_server import PostgresServer, postgres_bin_dir

pytestmark = pytest.mark.skipif(postgres_bin_dir() is None, reason="needs PostgreSQL")

LEASE = 3.0


def _group(pgid: int) -> list[int]:
    """Processes still in process group ``pgid`` (the postmaster's backends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    found.append(int(entry.name))
    return found


def _crash(server: PostgresServer) -> None:
    """SIGKILL the postmaster, as the OOM killer would; its backends notice and exit."""
    assert server.process is not None
    pgid = server.process.pid
    server.kill()
    try:
        wait_until(lambda: not _group(pgid), 15, interval=0.05, what="the backends to exit")
    except AssertionError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(parse_postgres_url(url).conninfo, autocommit=True)


@pytest.mark.slow
def test_postgres_killed_and_restarted_workers_resume_nothing_acknowledged_lost(
    private_server: PostgresServer, faults: Faults
) -> None:
    """Producer and 2 workers running; the postmaster is SIGKILLed and restarted 2 s later
    (crash recovery); every enqueue that returned runs, and the workers resume by themselves.
    How soon after the server answers is a figure, not an assertion (target 2 s; the
    fetcher's retry delays, 0.5-1-2-5 s, decide it after an outage of a few seconds)."""
    url = f"{private_server.url}?schema=crash"
    app, jobs = faults.client(url)
    workers = [faults.worker(url, name=f"w{i}", lease=LEASE) for i in range(2)]
    producer = Producer(jobs["faults.work"])
    producer.start()
    wait_until(lambda: faults.log.starts() > 100 and all_working(faults.log, workers), 60,
               what="work to flow through every worker")
    crashed_at = time.time()
    _crash(private_server)
    time.sleep(2.0)
    private_server.start()  # returns once the server answers again
    back_at = time.time()
    resumed = wait_until(lambda: faults.log.first_start_after(back_at), 30, interval=0.02,
                         what="jobs to flow again")
    # and enqueues return again: then the producer stops (every one that returned must run)
    wait_until(lambda: any(at > back_at for _, at in list(producer.acked)), 30,
               interval=0.02, what="enqueues to return again")
    producer.halt.set()
    producer.join(timeout=30)

    wait_until(lambda: drained(app), 90, interval=0.2, what="every job to finish")
    acked = dict(producer.acked)
    before_crash = [job_id for job_id, at in producer.acked if at < crashed_at]
    assert states(app, acked) == {"succeeded": len(acked)}
    assert all(w.alive() for w in workers), "a worker died with PostgreSQL"
    report(
        "16 PostgreSQL kill -9 + restart", "postgres", acked=len(acked),
        acked_before_crash=len(before_crash), lost=0,
        refused_while_down=len(producer.refused), resumed_after_s=resumed - back_at,
    )


@pytest.mark.slow
def test_worker_connections_terminated_by_the_server_reconnect_and_lose_nothing(
    postgres_server: Any, faults: Faults
) -> None:
    """``pg_terminate_backend`` of every conveyor connection (hot path, LISTEN, acker), three
    times while a batch of 1,500 jobs runs: the workers reconnect and the batch ends exact."""
    url = f"{postgres_server.url}?schema=f{uuid.uuid4().hex[:10]}"
    app, jobs = faults.client(url)
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(20,)] * 1500, "terminated")
    app.close()  # the checks reconnect afterwards: only the workers' connections are cut
    workers = [faults.worker(url, name=f"w{i}", lease=LEASE) for i in range(2)]
    wait_until(lambda: faults.log.starts() > 150 and all_working(faults.log, workers), 60,
               what="work to flow through every worker")
    terminated = 0
    with _admin(postgres_server.url) as admin:
        for _ in range(3):
            cut_at = time.time()
            rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE application_name = 'conveyor' AND pid <> "
                                 "pg_backend_pid()").fetchall()
            terminated += sum(1 for (done,) in rows if done)
            wait_until(lambda: faults.log.first_start_after(cut_at), 30, interval=0.02,  # noqa: B023
                       what="jobs to flow again")
    resumed = faults.log.first_start_after(cut_at)
    assert resumed is not None

    checker, _ = faults.client(url)
    _, done_at = wait_batch(checker, batch_id, timeout=90)
    assert states(checker, ids) == {"succeeded": len(ids)}
    assert_batch_exact(checker, batch_id, {"succeeded": len(ids)})
    assert all(w.alive() for w in workers), "a worker died with its connection"
    runs = faults.log.executions()
    report(
        "17 pg_terminate_backend x3", "postgres", jobs=len(ids), lost=0,
        connections_cut=terminated, extra_runs=sum(len(runs[j]) - 1 for j in ids),
        resumed_after_last_cut_s=resumed - cut_at, drained_after_last_cut_s=done_at - cut_at,
    )


@pytest.mark.slow
def test_four_worker_processes_contend_on_one_database_and_run_each_job_once(
    postgres_server: Any, faults: Faults
) -> None:
    """Four ``conveyor worker`` processes (4 threads each) drain 2,000 short jobs: no job runs
    twice, none is lost, the counters are exact."""
    url = f"{postgres_server.url}?schema=f{uuid.uuid4().hex[:10]}"
    app, jobs = faults.client(url)
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(5,)] * 2000, "contention")
    started = time.time()
    workers = [faults.worker(url, name=f"w{i}", lease=30) for i in range(4)]
    _, done_at = wait_batch(app, batch_id, timeout=120)
    assert states(app, ids) == {"succeeded": len(ids)}
    assert_batch_exact(app, batch_id, {"succeeded": len(ids)})
    runs = faults.log.executions()
    twice = [job_id for job_id in ids if len(runs.get(job_id, [])) != 1]
    assert twice == []
    ran_in = {r[0].pid for r in runs.values()}
    assert len(ran_in) == 4, "not every worker process took jobs: no contention was tested"
    assert all(w.alive() for w in workers)
    report("18 four processes contending", "postgres", jobs=len(ids), lost=0, run_twice=0,
           processes=len(ran_in), drained_s=done_at - started)


@pytest.mark.slow
def test_statement_timeout_is_an_outage_the_workers_ride_out(
    postgres_server: Any, faults: Faults
) -> None:
    """The workers' role has ``statement_timeout = 50ms``; the jobs table is locked for 3 s
    mid-batch (a long migration, say), so every statement of the workers is cancelled: they
    retry, and once the lock is gone the batch finishes exact."""
    schema = f"f{uuid.uuid4().hex[:10]}"
    url = f"{postgres_server.url}?schema={schema}"
    role = f"hasty_{schema}"
    with _admin(postgres_server.url) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
        admin.execute(f"ALTER ROLE {role} SET statement_timeout = '50ms'")
    hasty = url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
    app, jobs = faults.client(url)
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(20,)] * 1000, "statement timeout")
    workers = [faults.worker(hasty, name=f"w{i}", lease=10) for i in range(2)]
    wait_until(lambda: faults.log.starts() > 100 and all_working(faults.log, workers), 60,
               what="work to flow through every worker")
    with _admin(postgres_server.url) as admin, admin.transaction():
        admin.execute(f'LOCK TABLE "{schema}".jobs IN ACCESS EXCLUSIVE MODE')
        locked_at = time.time()
        time.sleep(3.0)
    back_at = time.time()
    resumed = wait_until(lambda: faults.log.first_start_after(back_at), 30, interval=0.02,
                         what="jobs to flow again")
    _, done_at = wait_batch(app, batch_id, timeout=90)
    assert states(app, ids) == {"succeeded": len(ids)}
    assert_batch_exact(app, batch_id, {"succeeded": len(ids)})
    assert all(w.alive() for w in workers), "a worker died of a statement timeout"
    outputs = "".join(w.output for w in workers)
    assert "statement timeout" in outputs, "no statement was cancelled: nothing was tested"
    runs = faults.log.executions()
    with _admin(postgres_server.url) as admin:
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")
    report("19 statement_timeout 50ms, 3 s lock", "postgres", jobs=len(ids), lost=0,
           extra_runs=sum(len(runs[j]) - 1 for j in ids), locked_s=back_at - locked_at,
           resumed_after_s=resumed - back_at, drained_after_s=done_at - back_at)
