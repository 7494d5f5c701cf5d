"""Debounce and throttle: a call joins the scheduled job of its key instead of making one.

``FlowControl.fold_key`` / ``fold`` (``Debounce`` / ``Throttle`` on the client): while the
job of a key is ``scheduled``, a call with that key is folded into it atomically (its newest
arguments, and under debounce its later run time) and answered with that job's id,
``created=False``; once the job started, the next call makes a new one.
"""

from __future__ import annotations

import threading

from conveyor.core.clock import FakeClock
from conveyor.core.job import FlowControl, JobSpec, JobState
from conveyor.storage import Backend
from tests.conformance.helpers import spec, take


def _call(backend: Backend, clock: FakeClock, mode: str, arg: int, key: str = "k",
          wait: float = 5.0) -> tuple[str, bool]:
    one = spec("fold", args=[arg], run_at=clock.now() + wait,
               flow=FlowControl(fold_key=key, fold=mode))
    [result] = backend.enqueue([one])
    return result.id, result.created


def _record(backend: Backend, job_id: str) -> tuple[JobState, list[object], float | None]:
    rec = backend.get_job(job_id)
    assert rec is not None
    return rec.state, rec.args, rec.run_at


def test_debounce_runs_once_after_the_last_call_with_its_arguments(
        backend: Backend, clock: FakeClock) -> None:
    t0 = clock.now()
    first, created = _call(backend, clock, "debounce", 1)
    assert created
    clock.advance(2)
    again, created = _call(backend, clock, "debounce", 2)
    assert (again, created) == (first, False)
    assert _record(backend, first) == (JobState.SCHEDULED, [2], t0 + 7)
    clock.advance(4)  # past the first call's time, before the last one's
    backend.promote_due()
    assert _record(backend, first)[0] is JobState.SCHEDULED
    clock.advance(2)
    backend.promote_due()
    [job] = take(backend, ["fold"])
    assert job.id == first
    after, created = _call(backend, clock, "debounce", 3)  # the job started: a new window
    assert created and after != first
    assert backend.count_jobs(queue="fold") == 2


def test_debounce_may_keep_the_first_arguments(backend: Backend, clock: FakeClock) -> None:
    t0 = clock.now()
    first, _ = _call(backend, clock, "debounce-first", 1)
    clock.advance(3)
    assert _call(backend, clock, "debounce-first", 2) == (first, False)
    assert _record(backend, first) == (JobState.SCHEDULED, [1], t0 + 8)


def test_throttle_keeps_the_window_and_the_first_or_last_arguments(
        backend: Backend, clock: FakeClock) -> None:
    t0 = clock.now()
    first, _ = _call(backend, clock, "throttle", 1, key="a")
    last, _ = _call(backend, clock, "throttle-last", 1, key="b")
    clock.advance(3)
    assert _call(backend, clock, "throttle", 2, key="a") == (first, False)
    assert _call(backend, clock, "throttle-last", 2, key="b") == (last, False)
    assert _record(backend, first) == (JobState.SCHEDULED, [1], t0 + 5)
    assert _record(backend, last) == (JobState.SCHEDULED, [2], t0 + 5)


def test_keys_fold_apart_and_ids_stay_idempotent(backend: Backend, clock: FakeClock) -> None:
    a, _ = _call(backend, clock, "debounce", 1, key="a")
    b, _ = _call(backend, clock, "debounce", 1, key="b")
    assert a != b
    same = JobSpec(id=a, name="tests.noop", queue="fold", payload='{"a":[9],"k":{}}',
                   run_at=clock.now() + 5, flow=FlowControl(fold_key="a", fold="debounce"))
    [result] = backend.enqueue([same])  # its own id again: as any existing id
    assert (result.id, result.created) == (a, False)
    assert backend.count_jobs(state=JobState.SCHEDULED, queue="fold") == 2


def test_concurrent_calls_of_one_key_make_one_job(backend: Backend, clock: FakeClock) -> None:
    ids: list[str] = []
    lock = threading.Lock()

    def burst(n: int) -> None:
        for i in range(25):
            job_id, _ = _call(backend, clock, "debounce", n * 100 + i, key="hot")
            with lock:
                ids.append(job_id)

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1 and len(ids) == 100
    assert backend.count_jobs(queue="fold") == 1
