"""Waiting for results: JobRef.result / aresult, status, cancel."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conveyor import Conveyor, JobRef, JobState
from conveyor.client.registry import JobFunction
from conveyor.core.job import Outcome
from conveyor.errors import JobFailed, JobNotFound, ResultTimeout
from tests.api.helpers import run_by_hand


@pytest.fixture
def job(app: Conveyor) -> JobFunction:
    @app.job
    def job(n: int) -> dict[str, int]:
        return {"n": n}

    return job


def enqueue(job: JobFunction, n: int = 1) -> JobRef:
    ref = job.enqueue(n)
    assert ref is not None
    return ref


def test_result_returns_the_decoded_result(app: Conveyor, job: JobFunction) -> None:
    ref = enqueue(job)
    run_by_hand(app, result={"n": 1, "rows": [1, 2]})
    assert ref.result(timeout=5) == {"n": 1, "rows": [1, 2]}


def test_result_waits_for_a_job_finished_by_another_thread(
    app: Conveyor, job: JobFunction
) -> None:
    ref = enqueue(job)
    waiting = threading.Event()

    def worker() -> None:
        waiting.wait(5)
        run_by_hand(app, result=["late"])

    thread = threading.Thread(target=worker)
    thread.start()
    with pytest.raises(ResultTimeout):
        ref.result(timeout=0)
    waiting.set()
    assert ref.result(timeout=30) == ["late"]
    thread.join()


@pytest.mark.parametrize("outcome", [Outcome.FAILED, Outcome.CANCELLED])
def test_result_raises_job_failed(app: Conveyor, job: JobFunction, outcome: Outcome) -> None:
    ref = enqueue(job)
    run_by_hand(app, outcome, message="seller not qualified")
    with pytest.raises(JobFailed, match=f"ended {outcome.value}") as info:
        ref.result(timeout=5)
    assert (info.value.job_id, info.value.state) == (ref.id, outcome.value)


def test_cancelled_before_it_ran(app: Conveyor, job: JobFunction) -> None:
    ref = enqueue(job)
    assert app.cancel(ref.id) is JobState.CANCELLED
    with pytest.raises(JobFailed, match="cancelled"):
        ref.result()
    assert app.cancel("no-such-job") is None


def test_aresult_in_asyncio(app: Conveyor, job: JobFunction) -> None:
    ref = enqueue(job)

    async def main() -> object:
        with pytest.raises(ResultTimeout):
            await ref.aresult(timeout=0.01)
        run_by_hand(app, result=7)
        return await ref.aresult(timeout=5)

    assert asyncio.run(main()) == 7


def test_status_has_state_and_events(app: Conveyor, job: JobFunction) -> None:
    ref = enqueue(job)
    run_by_hand(app, result=None)
    record = ref.status()
    assert record is not None and record.state is JobState.SUCCEEDED
    assert [e.kind for e in record.events or []] == ["enqueued", "started", "succeeded"]
    assert ref.result() is None


def test_result_of_a_job_that_is_not_stored(app: Conveyor) -> None:
    with pytest.raises(JobNotFound):
        JobRef("missing", source=app).result(timeout=1)


class QuotaExceeded(Exception):
    """A job's own error class, importable here (this module)."""


def test_result_raises_the_jobs_own_exception(app: Conveyor) -> None:
    """Celery's ``AsyncResult.get()`` re-raises the task's exception (its integration
    test_canvas.py::test_link_error::test_link_error_using_signature reads it back); issue 50:
    ``result()`` raised ``JobFailed``, so ``except QuotaExceeded:`` around it never matched.
    The class is rebuilt from its stored path (never unpickled), derives from ``JobFailed``
    too, and carries the job's context. ``SystemExit`` is never raised in the reader."""
    from conveyor.testing import drain

    @app.job(name="t.quota", retry=False)
    def quota(user: str) -> None:
        raise QuotaExceeded(f"{user} is over quota")

    @app.job(name="t.lookup", retry=False)
    def lookup(key: str) -> None:
        raise KeyError(key)

    @app.job(name="t.leave", retry=False)
    def leave() -> None:
        raise SystemExit(3)

    refs = [quota.enqueue("ada"), lookup.enqueue("missing"), leave.enqueue()]
    drain(app)
    first, second, third = (r for r in refs if r is not None)
    with pytest.raises(QuotaExceeded, match="ada is over quota") as raised:
        first.result(timeout=5)
    assert isinstance(raised.value, JobFailed)
    assert (raised.value.job_id, raised.value.state) == (first.id, "dead")
    assert raised.value.error_type == f"{__name__}.QuotaExceeded"
    assert "QuotaExceeded: ada is over quota" in (raised.value.job_traceback or "")
    with pytest.raises(KeyError):
        asyncio.run(second.aresult(timeout=5))
    with pytest.raises(JobFailed) as exited:
        third.result(timeout=5)
    assert type(exited.value) is JobFailed and exited.value.error_type == "SystemExit"
