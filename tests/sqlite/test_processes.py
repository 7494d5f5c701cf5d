"""Several real processes on one SQLite file: exclusive leases, kill -9, cross-process wake-up.

Children are forked with the storage object opened in the parent, which also checks that a
connection opened before ``fork`` is never used in the child.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conveyor.core.job import Ack, JobSpec, JobState, Outcome
from conveyor.storage.sqlite.storage import SqliteStorage, open_sqlite

pytestmark = pytest.mark.slow

FORK = multiprocessing.get_context("fork")


def _specs(n: int, queue: str = "default") -> list[JobSpec]:
    return [JobSpec(id=f"job{i:06d}", name="tests.noop", queue=queue,
                    payload=f'{{"a":[{i}],"k":{{}}}}') for i in range(n)]


def _drain(store: SqliteStorage, worker: str, out: Path) -> None:
    """Dequeue and acknowledge until the queue stays empty; write the ids taken to ``out``."""
    taken: list[str] = []
    idle = 0
    while idle < 3:
        jobs = store.dequeue(["default"], worker, 50, 60.0)
        if not jobs:
            idle += 1
            store.wait(["default"], 0.05)
            continue
        idle = 0
        taken += [j.id for j in jobs]
        applied = store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in jobs])
        assert all(applied)
    out.write_text("\n".join(taken))


def _read_taken(paths: list[Path]) -> Counter[str]:
    taken: Counter[str] = Counter()
    for path in paths:
        taken.update(line for line in path.read_text().splitlines() if line)
    return taken


def test_four_processes_lease_every_job_exactly_once(tmp_path: Path) -> None:
    store = open_sqlite(f"sqlite:///{tmp_path / 'shared.db'}")
    specs = _specs(5000)
    store.enqueue(specs)
    store.dequeue(["other"], "parent", 1, 1.0)  # the parent holds a connection before fork
    outs = [tmp_path / f"taken{i}.txt" for i in range(4)]
    procs = [FORK.Process(target=_drain, args=(store, f"w{i}", outs[i])) for i in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(90)
        assert proc.exitcode == 0
    taken = _read_taken(outs)
    assert sorted(taken) == sorted(s.id for s in specs)
    assert max(taken.values()) == 1
    assert store.count_jobs(state=JobState.SUCCEEDED) == 5000
    record = store.get_job("job004999")
    assert record is not None and [e.kind for e in record.events or []].count("started") == 1
    store.close()


def _hold_write_lock(path: Path, ready: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE jobs SET state = 'active', token = 'stolen' WHERE queue = 'default'")
    ready.write_text("holding")
    time.sleep(120)


def test_a_process_killed_inside_a_write_transaction_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    store = open_sqlite(f"sqlite:///{path}")
    specs = _specs(1000)
    store.enqueue(specs)
    ready = tmp_path / "ready"
    holder = FORK.Process(target=_hold_write_lock, args=(path, ready))
    holder.start()
    for _ in range(1000):
        if ready.exists():
            break
        time.sleep(0.01)
    assert ready.exists(), "the lock holder never took its write lock"
    outs = [tmp_path / f"taken{i}.txt" for i in range(2)]
    drains = [FORK.Process(target=_drain, args=(store, f"w{i}", outs[i])) for i in range(2)]
    for proc in drains:
        proc.start()
    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    assert holder.exitcode == -signal.SIGKILL
    for proc in drains:
        proc.join(90)
        assert proc.exitcode == 0
    taken = _read_taken(outs)
    assert sorted(taken) == sorted(s.id for s in specs) and max(taken.values()) == 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM jobs WHERE token = 'stolen'").fetchone()[0] == 0
    assert store.count_jobs(state=JobState.SUCCEEDED) == 1000
    store.close()


def _enqueue_until(url: str, done: Path) -> None:
    """Keep adding work until the parent says it woke (it may not be waiting yet at first)."""
    store = open_sqlite(url)
    for i in range(1000):
        if done.exists():
            break
        store.enqueue([JobSpec(id=f"r{i}", name="tests.noop", queue="remote", payload="{}")])
        time.sleep(0.02)
    store.close()


def test_wait_wakes_on_a_job_enqueued_by_another_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'wake.db'}"
    store = open_sqlite(url)
    done = tmp_path / "done"
    child = FORK.Process(target=_enqueue_until, args=(url, done))
    child.start()
    # No in-process notification can reach us from the child: only data_version can.
    woke = store.wait(["remote"], 30.0)
    done.write_text("done")
    child.join(30)
    assert woke is True
    assert {j.queue for j in store.dequeue(["remote"], "w", 5, 30.0)} == {"remote"}
    store.close()


def test_wait_times_out_without_work(tmp_path: Path) -> None:
    store = open_sqlite(f"sqlite:///{tmp_path / 'idle.db'}")
    store.enqueue(_specs(1, queue="elsewhere"))
    assert store.wait(["default"], 0.05) is False
    store.close()


def _open_at_once(url: str, barrier: Any) -> None:
    barrier.wait()
    store = open_sqlite(url)
    pid = os.getpid()
    store.enqueue([JobSpec(id=f"p{pid}", name="tests.noop", queue=f"q{pid}", payload="{}")])
    store.close()


def test_processes_creating_one_fresh_file_at_once_all_succeed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    barrier = FORK.Barrier(6)
    procs = [FORK.Process(target=_open_at_once, args=(url, barrier)) for _ in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * 6
    store = open_sqlite(url)
    assert len(store.queues()) == 6 and store.count_jobs() == 6
    store.close()
