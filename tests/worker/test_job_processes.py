"""The process executor: ``def`` jobs in job processes the worker kills at their timeout,
with the job's context, outcomes, cancellation and enqueues working as in a thread.

Expectations from the peers: Celery's prefork pool kills a task past its hard
``time_limit`` and replaces the process (``TimeLimitExceeded``), even one stuck in C code;
``worker_max_tasks_per_child`` / ``worker_max_memory_per_child`` replace a pool process
after a task, never during one; a pool process that dies under a task fails that task
(``WorkerLostError``) without taking the others down.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor import Aggregate, Conveyor, JobState
from conveyor.core.job import EventKind, JobRecord
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from tests.worker import process_jobs

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Conveyor]:
    """The app of ``process_jobs`` on a SQLite file its job processes reach too."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    monkeypatch.setenv("CONVEYOR_URL", url)  # a job process imports the module afresh
    process_jobs.app.close()
    process_jobs.app.url = url
    yield process_jobs.app
    process_jobs.app.close()


def _launcher(app: Conveyor, **options: object) -> Launcher:
    settings: dict[str, object] = {"concurrency": 2, **options}
    config = WorkerConfig(heartbeat_interval=0.1, lease=5.0, poll_interval=(0.02, 0.05),
                          worker_id="proc-test", app="tests.worker.process_jobs:app",
                          **settings)  # type: ignore[arg-type]
    launcher = Launcher(app, config)
    launcher.start()
    return launcher


def _until(check: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _record(app: Conveyor, job_id: str) -> JobRecord:
    record = app.get_job(job_id)
    assert record is not None
    return record


def _error(record: JobRecord) -> dict[str, str]:
    """The error the job's last attempt ended with, as its event stores it."""
    data = [e.data for e in record.events or [] if e.data and "traceback" in e.data]
    assert data, f"no error event: {record.events}"
    return dict(data[-1])


def _ended(app: Conveyor, job_id: str, state: JobState) -> Callable[[], bool]:
    return lambda: _record(app, job_id).state is state


def test_a_job_hung_in_c_or_on_a_socket_ends_at_its_deadline(app: Conveyor) -> None:
    """A ``time.sleep`` inside a C call and a blocking socket without a timeout: in a thread
    both would run on, abandoned; here each job process is killed at the 1 s deadline and the
    attempt ends as the timeout rule says (a ``JobTimeout`` error, retried)."""
    refs = [process_jobs.hang_in_c.enqueue(), process_jobs.hang_on_socket.enqueue()]
    launcher = _launcher(app)
    try:
        for ref in refs:
            assert ref is not None
            _until(_ended(app, ref.id, JobState.RETRYING))
        assert launcher.processes.killed == 2
        assert launcher.threads.abandoned == 0  # no thread left running a job
    finally:
        launcher.stop(5)
    for ref in refs:
        assert ref is not None
        record = _record(app, ref.id)
        assert _error(record)["type"].endswith("JobTimeout")
        assert "ran longer than its timeout of 1s" in (record.message or "")
        assert (record.attempt, record.errors, record.recoveries) == (1, 1, 0)


def test_the_job_context_outcomes_and_enqueues_work_from_a_job_process(app: Conveyor) -> None:
    report = process_jobs.report.enqueue(3, label="résumé \ud800")
    failed, boom, later = (process_jobs.fail.enqueue(), process_jobs.boom.enqueue(),
                           process_jobs.retry_later.enqueue())
    died, follow = process_jobs.die.enqueue(), process_jobs.follow_up.enqueue()
    launcher = _launcher(app)
    try:
        assert report is not None and follow is not None and died is not None
        _until(_ended(app, report.id, JobState.SUCCEEDED))
        for ref, state in ((failed, JobState.FAILED), (boom, JobState.RETRYING),
                           (later, JobState.RETRYING), (died, JobState.RETRYING),
                           (follow, JobState.SUCCEEDED)):
            assert ref is not None
            _until(_ended(app, ref.id, state))
        followed = _record(app, follow.id).result
        assert followed is not None
        _until(_ended(app, json.loads(followed), JobState.SUCCEEDED))
    finally:
        launcher.stop(5)
    record = _record(app, report.id)
    result = json.loads(record.result or "null")
    assert result["pid"] != os.getpid() and result["job_id"] == report.id
    assert (result["attempt"], result["worker"]) == (1, "proc-test")
    assert result["label"] == "résumé \ud800"  # data round-trips exactly, lone surrogate too
    messages = [e for e in record.events or [] if e.kind == EventKind.MESSAGE]
    assert [e.message for e in messages] == [f"résumé \ufffd step {i}" for i in range(3)]
    assert [e.data for e in messages] == [{"step": i} for i in range(3)]
    assert record.progress == (3, 3)
    assert _record(app, failed.id).message == "no such seller"  # type: ignore[union-attr]
    error = _error(_record(app, boom.id))  # type: ignore[union-attr]
    assert error["type"] == "ValueError"
    assert 'raise ValueError("boom in a job process")' in error["traceback"]
    retried = _record(app, later.id)  # type: ignore[union-attr]
    assert (retried.message, retried.attempt) == ("not yet", 1)  # retried when it asked
    crashed = _record(app, died.id)
    assert _error(crashed)["type"].endswith("JobProcessDied")
    assert "ended (exit code 3) before the job did" in (crashed.message or "")
    # The follow-up job was enqueued by the job process and ran in this worker's threads.
    assert _record(app, json.loads(followed)).result == str(os.getpid())


def test_a_cancellation_reaches_the_job_in_its_process(app: Conveyor) -> None:
    ref = process_jobs.until_cancelled.enqueue()
    assert ref is not None
    launcher = _launcher(app)
    try:
        _until(_ended(app, ref.id, JobState.ACTIVE))
        time.sleep(0.2)  # let it reach its loop: a cancel before the start is another rule
        assert app.cancel(ref.id) is JobState.ACTIVE
        _until(_ended(app, ref.id, JobState.CANCELLED))
    finally:
        launcher.stop(5)


def _pids(app: Conveyor, launcher_options: dict[str, object], jobs: list[object]) -> list[int]:
    """Run ``jobs`` (job functions, or (function, args)) one at a time; the pid of each."""
    refs = []
    for job in jobs:
        fn, args = job if isinstance(job, tuple) else (job, ())
        refs.append(fn.enqueue(*args))
    launcher = _launcher(app, concurrency=1, **launcher_options)
    try:
        for ref in refs:
            _until(_ended(app, ref.id, JobState.SUCCEEDED))
    finally:
        launcher.stop(5)
    return [int(_record(app, ref.id).result or 0) for ref in refs]


def test_job_processes_are_reused_and_recycled_after_max_jobs(app: Conveyor) -> None:
    reused = _pids(app, {}, [process_jobs.pid] * 3)
    assert len(set(reused)) == 1 and reused[0] != os.getpid()
    recycled = _pids(app, {"max_jobs_per_child": 2}, [process_jobs.pid] * 5)
    assert recycled[0] == recycled[1] != recycled[2] == recycled[3] != recycled[4]


def test_a_job_process_whose_memory_passed_the_limit_is_replaced_after_the_job(
        app: Conveyor) -> None:
    """The job that allocates and keeps 160 MiB ends normally; its process is replaced
    before the next job (Celery's rule for ``worker_max_memory_per_child``)."""
    pids = _pids(app, {"max_memory_per_child": 120},
                 [process_jobs.pid, process_jobs.pid, (process_jobs.hog, (160,)),
                  process_jobs.pid])
    assert pids[0] == pids[1] == pids[2] != pids[3]


def test_a_hard_shutdown_puts_the_job_back_and_kills_its_process(app: Conveyor) -> None:
    ref = process_jobs.until_cancelled.enqueue()
    assert ref is not None
    launcher = _launcher(app)
    pid = 0
    try:
        _until(lambda: any(e.message == "started" for e in _record(app, ref.id).events or []))
        [started] = [e for e in _record(app, ref.id).events or [] if e.message == "started"]
        pid = int((started.data or {})["pid"])
    finally:
        launcher.stop(0.2)  # far shorter than the job: a hard shutdown
    record = _record(app, ref.id)
    assert record.state is JobState.PENDING and record.errors == 0  # interrupted, no error
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed, and reaped: it cannot run on beside the job's next run


@pytest.mark.parametrize(("options", "message"), [
    ({"executor": "fork"}, "executor must be 'thread' or 'process'"),
    ({"executor": "process", "aggregate": Aggregate()}, "runs in the worker's threads"),
])
def test_the_executor_option_is_checked_at_import(options: dict[str, object],
                                                  message: str) -> None:
    app = Conveyor("memory://")
    with pytest.raises(ValueError, match=message):
        app.job(**options)(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="async def"):
        @app.job(executor="process")
        async def waits() -> None: ...


def test_a_pool_thread_that_exits_does_not_take_a_job_process_with_it(app: Conveyor) -> None:
    """A job process dies with its worker (PR_SET_PDEATHSIG), which Linux ties to the thread
    that started it: a pool thread abandoned past a thread job's timeout exits when that job
    returns, and must not kill the job process it once started, which another thread uses."""
    first = process_jobs.pid.enqueue()
    assert first is not None
    launcher = _launcher(app, concurrency=1)
    try:
        _until(_ended(app, first.id, JobState.SUCCEEDED))
        overrun = process_jobs.overrun_in_thread.enqueue()
        assert overrun is not None
        _until(_ended(app, overrun.id, JobState.DEAD))  # timed out: its thread abandoned
        _until(lambda: launcher.threads.abandoned == 1 and not any(
            t.name == "conveyor-job-1" for t in threading.enumerate()))  # and now gone
        again = process_jobs.pid.enqueue()
        assert again is not None
        _until(lambda: _record(app, again.id).state in (JobState.SUCCEEDED,
                                                         JobState.RETRYING))
    finally:
        launcher.stop(5)
    assert _record(app, again.id).state is JobState.SUCCEEDED
    assert _record(app, again.id).result == _record(app, first.id).result  # the same process
