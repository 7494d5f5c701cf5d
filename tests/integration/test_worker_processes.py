"""``conveyor worker`` as real subprocesses on one SQLite file, with real signals."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor import Conveyor, JobState
from conveyor.client.registry import JobFunction
from tests.integration.harness import Worker, runs, until

pytestmark = pytest.mark.slow


def _job(client: Conveyor, name: str) -> JobFunction:
    fn = client.registry.get(name)
    assert fn is not None
    return fn


def _count(client: Conveyor, state: JobState) -> int:
    return client.storage.count_jobs(state=state)


def test_kill_9_loses_nothing_and_reruns_only_active_jobs(
    client: Conveyor, spawn: Callable[..., Worker], tmp_path: Path
) -> None:
    refs = _job(client, "work").enqueue_many([((10,), {}) for _ in range(2000)])
    ids = {r.id for r in refs}
    first = spawn("-c", "10", "--lease", "2")
    assert until(lambda: sum(runs(tmp_path).values()) >= 300, 30), first.log()
    first.signal(signal.SIGKILL)
    first.wait()
    active = {r.id for r in client.storage.list_jobs(state=JobState.ACTIVE, limit=10_000)}
    assert active, "the kill must land while jobs run"
    second = spawn("-c", "20", "--lease", "2")
    assert until(lambda: _count(client, JobState.SUCCEEDED) == 2000, 30), second.log()
    counts = runs(tmp_path)
    assert set(counts) == ids  # none lost
    twice = {job_id for job_id, n in counts.items() if n > 1}
    assert twice <= active  # only jobs active at the kill ran again
    assert max(counts.values()) <= 2
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def test_sigterm_puts_jobs_longer_than_the_timeout_back_then_the_next_worker_ends_them(
    client: Conveyor, spawn: Callable[..., Worker], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    refs = [_job(client, "hold").enqueue(str(release)) for _ in range(3)]
    worker = spawn("-c", "3", "--timeout", "1")
    assert until(lambda: _count(client, JobState.ACTIVE) == 3), worker.log()
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    for ref in refs:
        record = client.get_job(ref.id)
        assert record is not None and record.state is JobState.PENDING
        assert any(e.kind == "interrupted" for e in record.events or [])
        assert record.errors == 0
    assert "hard shutdown" in worker.log()
    release.touch()
    nxt = spawn("-c", "3")
    assert until(lambda: _count(client, JobState.SUCCEEDED) == 3), nxt.log()
    nxt.signal(signal.SIGINT)
    assert nxt.wait(20) == 0


def test_several_worker_processes_run_every_job_exactly_once(
    client: Conveyor, spawn: Callable[..., Worker], tmp_path: Path
) -> None:
    # Four processes (two alone, two under a supervisor); each job waits until all four have
    # started one, so no process can run them all before the others lease theirs.
    refs = _job(client, "work").enqueue_many([((), {"processes": 4}) for _ in range(5000)])
    workers = [spawn("-c", "8") for _ in range(2)] + [spawn("-c", "8", "--processes", "2")]
    assert until(lambda: _count(client, JobState.SUCCEEDED) == 5000, 60), workers[0].log()
    counts = runs(tmp_path)
    assert set(counts) == {r.id for r in refs}
    assert set(counts.values()) == {1}
    pids = {line.split()[1] for line in (tmp_path / "runs.txt").read_text().splitlines()}
    assert len(pids) == 4  # the work was shared: every process ran some
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0]


def test_tstp_quiets_and_ttin_dumps_stacks(
    client: Conveyor, spawn: Callable[..., Worker], tmp_path: Path
) -> None:
    worker = spawn("-c", "2")
    worker.wait_ready()
    worker.signal(signal.SIGTSTP)
    assert until(lambda: "quiet: no new jobs" in worker.log()), worker.log()
    ref = _job(client, "work").enqueue()
    worker.signal(signal.SIGTTIN)
    assert until(lambda: "thread dump" in worker.log()), worker.log()
    dump = worker.log().split("thread dump (pid")[1]
    assert "conveyor-heartbeat" in dump and "MainThread" in dump
    assert client.get_job(ref.id).state is JobState.PENDING  # type: ignore[union-attr]
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert client.get_job(ref.id).state is JobState.PENDING  # type: ignore[union-attr]


def test_supervisor_restarts_a_child_killed_with_9(
    client: Conveyor, spawn: Callable[..., Worker], tmp_path: Path
) -> None:
    supervisor = spawn("-c", "2", "--processes", "2")
    assert until(lambda: len(supervisor.children()) == 2), supervisor.log()
    victim = supervisor.children()[0]
    os.kill(victim, signal.SIGKILL)
    # Count restarts by the supervisor's own lines: its children also include the short-lived
    # helper that hands back the dead child's jobs, so "two children again" proves nothing.
    assert until(lambda: supervisor.log().count("started worker process") == 3), supervisor.log()
    assert "restarting" in supervisor.log()
    assert victim not in supervisor.children()
    refs = _job(client, "work").enqueue_many([((), {}) for _ in range(50)])
    assert until(lambda: _count(client, JobState.SUCCEEDED) == 50), supervisor.log()
    assert set(runs(tmp_path)) == {r.id for r in refs}
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0
    assert supervisor.children() == []


def test_a_second_sigterm_hard_stops_at_once(
    client: Conveyor, spawn: Callable[..., Worker], tmp_path: Path
) -> None:
    ref = _job(client, "hold").enqueue(str(tmp_path / "never"))
    worker = spawn("-c", "1", "--timeout", "60")
    assert until(lambda: _count(client, JobState.ACTIVE) == 1), worker.log()
    worker.signal(signal.SIGTERM)
    assert until(lambda: "stopping" in worker.log())
    time.sleep(0.6)  # a repeat within 0.5 s is the same Ctrl-C seen twice, not a second one
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0  # far sooner than --timeout 60
    assert "second SIGTERM: hard shutdown now" in worker.log()
    record = client.get_job(ref.id)
    assert record is not None and record.state is JobState.PENDING
