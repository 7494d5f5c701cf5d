"""Scenario 7: the embedded SQLite storage under process death and contention.

A worker is SIGKILLed while it provably holds the database's write lock (it is frozen with
SIGSTOP, and a probe's ``BEGIN IMMEDIATE`` finds the file locked); 4 worker processes and an
enqueuing client share one file. The database passes ``PRAGMA integrity_check`` and nothing
is lost.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from conveyor.core.job import JobState
from tests.faults.checks import assert_batch_exact, enqueue_batch, extra_runs, states, wait_batch
from tests.faults.conftest import Faults
from tests.faults.harness import WorkerProc, process_state, report, wait_until

LEASE = 3.0


def write_locked(db: Path) -> bool:
    """True when another connection holds the write lock (is inside a write transaction)."""
    con = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return True
        raise
    finally:
        con.close()


def integrity(db: Path) -> str:
    """The result of ``PRAGMA integrity_check`` ("ok" when the file is sound)."""
    con = sqlite3.connect(db)
    try:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


def _freeze(worker: WorkerProc) -> None:
    worker.signal(signal.SIGSTOP)
    wait_until(lambda: process_state(worker.pid) == "T", 5, interval=0.001, what="SIGSTOP")


@pytest.mark.slow
def test_worker_killed_inside_a_write_transaction(tmp_path: Path, faults: Faults) -> None:
    """Freeze the worker at random moments until it is caught holding the write lock, then
    SIGKILL it; five times. The next worker finishes the batch."""
    db = tmp_path / "conveyor.db"
    url = f"sqlite:///{db}"
    app, jobs = faults.client(url)
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(1,)] * 4000, "kill in txn")
    rng = random.Random(7)
    worker = faults.worker(url, name="victim0", concurrency=4, lease=LEASE)
    wait_until(lambda: faults.log.starts() > 20, 30, what="work to flow")
    kills: dict[int, float] = {}
    probes = 0
    while len(kills) < 5 and probes < 2000 and not app.batch_status(batch_id)["complete"]:
        time.sleep(rng.uniform(0.005, 0.05))
        _freeze(worker)
        probes += 1
        if write_locked(db):
            kills[worker.pid] = worker.kill9()
            worker = faults.worker(url, name=f"victim{len(kills)}", concurrency=4, lease=LEASE)
        else:
            worker.signal(signal.SIGCONT)
    assert kills, f"never caught a worker inside a write transaction in {probes} probes"

    wait_batch(app, batch_id, timeout=60)
    assert integrity(db) == "ok"
    assert states(app, ids) == {"succeeded": len(ids)}
    assert_batch_exact(app, batch_id, {"succeeded": len(ids)})
    runs = extra_runs(faults.log, ids, set(kills))
    assert runs.unexplained == []
    report("7 SQLite kill inside write txn", "sqlite", kills_in_txn=len(kills), probes=probes,
           lost=0, extra_runs=runs.extra_runs, integrity="ok")


@pytest.mark.slow
def test_four_processes_contend_on_one_file(tmp_path: Path, faults: Faults) -> None:
    """4 worker processes drain one file while this process keeps enqueuing: every job runs
    exactly once, no worker reports a locked database, and the file is sound."""
    db = tmp_path / "conveyor.db"
    url = f"sqlite:///{db}"
    app, jobs = faults.client(url)
    # every job waits until the four processes have each started one: the work is shared
    batch_id, ids = enqueue_batch(app, jobs["faults.work"], [(2, 4)] * 1500, "contention")
    workers = [faults.worker(url, name=f"w{i}", concurrency=4) for i in range(4)]
    late: list[str] = []

    def produce() -> None:
        for _ in range(20):
            late.extend(ref.id for ref in jobs["faults.work"].enqueue_many([(2,)] * 25))
            time.sleep(0.05)

    producer = threading.Thread(target=produce)
    started = time.time()
    producer.start()
    wait_batch(app, batch_id, timeout=60)
    producer.join(timeout=60)
    wait_until(lambda: app.storage.count_jobs(state=JobState.SUCCEEDED) == len(ids) + len(late),
               60, what="the late jobs to finish")
    elapsed = time.time() - started

    assert integrity(db) == "ok"
    assert_batch_exact(app, batch_id, {"succeeded": len(ids)})
    assert states(app, late) == {"succeeded": len(late)}
    runs = faults.log.executions()
    assert all(len(runs[job_id]) == 1 for job_id in [*ids, *late])
    pids = {run[0].pid for run in runs.values()}
    assert len(pids) == 4, "the work was not shared between the four processes"
    for worker in workers:
        assert worker.alive()
        assert "database is locked" not in worker.output, worker.output
        assert "Traceback" not in worker.output, worker.output
    report("7 SQLite 4 processes, 1 file", "sqlite", jobs=len(ids) + len(late), lost=0,
           run_twice=0, processes_used=len(pids), seconds=elapsed, integrity="ok")
