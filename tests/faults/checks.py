"""What every fault scenario checks afterwards: nothing lost, counters exact, extra runs
explained by a crash, and how long recovery took (from the jobs' own ``recovered`` events)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.app import Conveyor
from conveyor.client.registry import JobFunction
from conveyor.core.job import EventKind, JobRecord, JobState
from tests.faults.harness import ExecLog, Execution, WorkerProc, child_pids, wait_until


def enqueue_batch(
    app: Conveyor, fn: JobFunction, items: Sequence[Any], description: str
) -> tuple[str, list[str]]:
    """Enqueue ``items`` as one batch; returns the batch id and the job ids."""
    with app.batch(description=description) as batch:
        refs = fn.enqueue_many(items)
    ids = [ref.id for ref in refs]
    assert len(set(ids)) == len(items)
    return batch.id, ids


def wait_batch(app: Conveyor, batch_id: str, timeout: float) -> tuple[dict[str, Any], float]:
    """Wait until the batch is complete; returns its status and the wall-clock time seen.

    A batch that does not complete fails with its counts and the event logs of a few of its
    unfinished jobs: what a red run in CI needs to be read without running it again."""
    try:
        status = wait_until(
            lambda: _complete(app.batch_status(batch_id)), timeout, interval=0.05,
            what=f"batch {batch_id} to complete",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_unfinished(app, batch_id)}") from None
    return status, time.time()


_UNFINISHED_SHOWN = 5


def _unfinished(app: Conveyor, batch_id: str) -> str:
    """The batch's counts, then each of a few unfinished jobs with its events, one a line."""
    lines = [f"counts: {app.batch_status(batch_id)['counts']}"]
    for state in (JobState.PENDING, JobState.ACTIVE, JobState.RETRYING, JobState.SCHEDULED):
        for rec in app.storage.list_jobs(state=state, batch_id=batch_id,
                                         limit=_UNFINISHED_SHOWN, with_events=True):
            lines.append(f"{rec.id} {rec.state.value} attempt={rec.attempt} "
                         f"recoveries={rec.recoveries} worker={rec.worker}")
            lines.extend(f"    {e.ts:.3f} {e.kind} -> {e.state} {e.worker or ''} "
                         f"{e.message or ''}" for e in rec.events)
    return "\n".join(lines)


def _complete(status: dict[str, Any]) -> dict[str, Any] | None:
    return status if status["complete"] else None


def assert_batch_exact(app: Conveyor, batch_id: str, expected: dict[str, int]) -> None:
    """The batch's live counters equal ``expected`` (other states 0), and equal a recount of
    the stored jobs state by state."""
    status = app.batch_status(batch_id)
    assert status["total"] == sum(expected.values()), status
    for state in JobState:
        want = expected.get(state.value, 0)
        assert status["counts"][state.value] == want, (state, status["counts"])
        assert app.storage.count_jobs(batch_id=batch_id, state=state) == want, state


def states(app: Conveyor, ids: Iterable[str]) -> dict[str, int]:
    """How many of ``ids`` are in each state (``missing`` when a job is not stored at all)."""
    out: dict[str, int] = {}
    for job_id in ids:
        rec = app.storage.get_job(job_id)
        key = "missing" if rec is None else rec.state.value
        out[key] = out.get(key, 0) + 1
    return out


@dataclass
class RunStats:
    """Executions seen in the log for a set of jobs."""

    total_runs: int
    extra_runs: int
    jobs_run_twice: int
    unexplained: list[str]


def extra_runs(log: ExecLog, ids: Iterable[str], crashed_pids: set[int]) -> RunStats:
    """Count extra executions; an extra run is explained when every execution but the last
    ran in a process that was killed (the job was running when its worker died)."""
    runs = log.executions()
    total = extra = twice = 0
    unexplained: list[str] = []
    for job_id in ids:
        mine: list[Execution] = runs.get(job_id, [])
        total += len(mine)
        if len(mine) > 1:
            extra += len(mine) - 1
            twice += 1
            if any(run.pid not in crashed_pids for run in mine[:-1]):
                unexplained.append(job_id)
    return RunStats(total, extra, twice, unexplained)


def succeeded(app: Conveyor, job_id: str) -> JobRecord | None:
    """The job's record once it succeeded, else None (for ``wait_until``)."""
    rec = app.get_job(job_id)
    return rec if rec is not None and rec.state is JobState.SUCCEEDED else None


def recovered_events(rec: JobRecord) -> list[float]:
    """Times of a job's ``recovered`` events."""
    return [e.ts for e in rec.events or () if e.kind == EventKind.RECOVERED]


def recovery_delays(app: Conveyor, log: ExecLog, kills: dict[int, float]) -> list[float]:
    """For each execution that died with its process, seconds from the kill to the job's
    next ``recovered`` event (when it became runnable again)."""
    delays = []
    for job_id, runs in log.executions().items():
        dead_runs = [run for run in runs if run.pid in kills and run.ended is None]
        if not dead_runs:
            continue
        rec = app.get_job(job_id)
        assert rec is not None, job_id
        back = recovered_events(rec)
        for run in dead_runs:
            killed = kills[run.pid]
            later = [ts for ts in back if ts >= killed - 0.5]
            assert later, f"job {job_id} died with pid {run.pid} but was never recovered"
            delays.append(min(later) - killed)
    return delays


def describe(app: Conveyor, ids: list[str], runs: dict[str, list[Execution]], t0: float) -> str:
    """Runs and events of ``ids``, times relative to ``t0``, for a failure message."""
    lines = []
    for job_id in ids:
        rec = app.get_job(job_id)
        mine = runs.get(job_id, [])
        lines.append(f"job {job_id}: runs " + ", ".join(
            f"pid {r.pid} attempt {r.attempt} at {r.started - t0:+.2f}s" for r in mine))
        for e in (rec.events or []) if rec else []:
            lines.append(f"    {e.ts - t0:+.2f}s {e.kind} worker={e.worker} {e.message or ''}")
    return "\n".join(lines)


class Producer(threading.Thread):
    """Enqueues one job at a time until stopped, remembering which enqueues were
    acknowledged (returned) and when."""

    def __init__(self, job: JobFunction) -> None:
        super().__init__(daemon=True)
        self.job = job
        self.acked: list[tuple[str, float]] = []
        self.refused: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                ref = self.job.enqueue(20)
            except Exception as exc:  # the outage: any error means "not acknowledged"
                self.refused.append(type(exc).__name__)
                time.sleep(0.05)
                continue
            assert ref is not None
            self.acked.append((ref.id, time.time()))
            time.sleep(0.004)


def all_working(log: ExecLog, workers: list[WorkerProc]) -> bool:
    """Every worker has run a job: none is still starting up when the fault strikes (under
    load a worker can take seconds to start, and one that cannot reach its storage at start
    exits with a one-line error by design: a wrong URL must not look like a running worker)."""
    ran = {line["p"] for line in log.lines()}
    return all(ran & {w.pid, *child_pids(w.pid)} for w in workers)


def drained(app: Conveyor) -> bool:
    """No job is waiting or running any more."""
    waiting = (JobState.PENDING, JobState.ACTIVE, JobState.RETRYING, JobState.SCHEDULED)
    return all(app.storage.count_jobs(state=s) == 0 for s in waiting)


def wait_running(log: ExecLog, pids: Sequence[int], app: Conveyor, batch_id: str) -> list[int]:
    """Wait until some of processes ``pids`` run a job: those that do (none once the batch
    is done)."""
    def running() -> list[int]:
        busy = {run.pid for runs in log.executions().values() for run in runs
                if run.ended is None}
        return [pid for pid in pids if pid in busy]

    def done() -> bool:
        status = app.storage.get_batch(batch_id)
        return status is not None and status.complete

    wait_until(lambda: running() or done(), 60, what=f"one of workers {list(pids)} to run a job")
    return [] if done() else running()


def storm_while_running(faults: Any, app: Conveyor, batch_id: str, url: str, tag: str,
                        rng: Any, seconds: float = 8.0, **opts: Any) -> dict[int, float]:
    """Two workers on ``url`` (``opts``: concurrency, lease, env, args), then a random one of
    them SIGKILLed every ~1.5 s for ``seconds`` and started again at once, each time while it
    runs a job; returns the kill time by pid. A kill proves something only when it hits a running
    job: the one killed is drawn from those running one, waited for if none does (a worker just
    restarted: a Python start and a connection, ~1 s, longer on a loaded machine; a group join
    on Kafka; or one whose broker prefetch went to its sibling), unless the batch is done."""
    workers = [faults.worker(url, name=f"{tag}{i}", **opts) for i in range(2)]
    wait_until(lambda: faults.log.starts() > 20, 60, what="the workers to start working")
    kills: dict[int, float] = {}
    storm_end = time.time() + seconds
    while time.time() < storm_end:
        time.sleep(rng.uniform(1.2, 1.8))
        busy = wait_running(faults.log, [w.pid for w in workers], app, batch_id)
        if not busy:
            break
        i = [w.pid for w in workers].index(rng.choice(busy))
        kills[workers[i].pid] = workers[i].kill9()
        workers[i] = faults.worker(url, name=f"{tag}{len(faults.workers)}", **opts)
    return kills
