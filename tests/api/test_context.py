"""The running job's context: current_job, messages, progress, cancellation."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conveyor import Conveyor, FakeClock, JobContext, current_job
from conveyor.client.builtin_jobs import run_errback, run_map
from conveyor.client.context import JobRuntime, activate, current_batch
from conveyor.errors import UnknownJobError


def make_ctx(app: Conveyor, job_id: str = "j1", **fields: object) -> JobContext:
    return JobContext(runtime=app.runtime, app=app, job_id=job_id, name="tests.job",
                      worker_id="w1", **fields)  # type: ignore[arg-type]


def test_current_job_outside_a_job_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="outside a running conveyor job"):
        current_job()


def test_activate_makes_the_context_current_and_restores(app: Conveyor) -> None:
    outer, inner = make_ctx(app, "outer"), make_ctx(app, "inner")
    with activate(outer):
        assert current_job() is outer
        with activate(inner):
            assert current_job() is inner
        assert current_job() is outer
    with pytest.raises(RuntimeError):
        current_job()


def test_log_and_progress_are_buffered_until_drained(app: Conveyor, clock: FakeClock) -> None:
    ctx = make_ctx(app, attempt=2)
    ctx.log("row 17: bad phone number", row=17)
    clock.advance(5)
    ctx.progress(40, 100)
    ctx.progress(50)
    events, progress = ctx.drain()
    assert [(e.kind, e.message, e.ts) for e in events] == [
        ("message", "row 17: bad phone number", clock.now() - 5),
        ("progress", None, clock.now()),
        ("progress", None, clock.now()),
    ]
    assert events[0].data == {"row": 17} and events[0].attempt == 2 and events[0].worker == "w1"
    assert events[2].data == {"done": 50, "total": 100}
    assert progress == (50, 100)
    assert ctx.drain() == ((), None)  # drained, and progress unchanged since


def test_cancellation_request_is_visible_to_the_job(app: Conveyor) -> None:
    ctx = make_ctx(app)
    assert not ctx.cancelled
    ctx.request_cancel()
    assert ctx.cancelled


def test_each_thread_sees_the_job_it_activated(app: Conveyor) -> None:
    seen: dict[str, str] = {}

    def run(job_id: str) -> None:
        with activate(make_ctx(app, job_id)):
            barrier.wait()
            seen[job_id] = current_job().job_id

    barrier = threading.Barrier(4)
    threads = [threading.Thread(target=run, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {f"t{i}": f"t{i}" for i in range(4)}


def test_each_asyncio_task_sees_its_own_job(app: Conveyor) -> None:
    async def run(job_id: str) -> str:
        with activate(make_ctx(app, job_id)):
            await asyncio.sleep(0)
            return current_job().job_id

    async def main() -> list[str]:
        return list(await asyncio.gather(*(run(f"a{i}") for i in range(5))))

    assert asyncio.run(main()) == [f"a{i}" for i in range(5)]


def test_a_job_does_not_inherit_the_callers_batch(app: Conveyor) -> None:
    with app.batch() as batch:
        assert current_batch() is batch
        with activate(make_ctx(app)):
            assert current_batch() is None
        assert current_batch() is batch


def test_from_leased_decodes_the_payload(app: Conveyor) -> None:
    @app.job
    def job(a: int, b: int) -> None: ...

    app.enqueue(job.name, [1], {"b": 2}, meta={"trace": "t"})
    [leased] = app.storage.dequeue(["default"], "w9", 1, 30.0)
    ctx = JobContext.from_leased(leased, worker_id="w9", runtime=app.runtime, app=app)
    assert (ctx.job_id, ctx.name, ctx.attempt, ctx.worker_id) == (leased.id, job.name, 1, "w9")
    assert (ctx.args, ctx.kwargs, ctx.meta) == ([1], {"b": 2}, {"trace": "t"})


def test_a_job_reaches_functions_records_and_its_workflow_through_its_runtime(
        app: Conveyor) -> None:
    """What a running job reaches beyond itself is handed to its context (issue 52: the
    context gets what it uses, as a bound Celery task reaches ``self.app`` given to it,
    never a global): conveyor's own jobs find job functions and records through
    ``ctx.runtime``, and ``ctx.app`` — the user's — may be anything."""
    @app.job
    def double(x: int) -> int:
        return 2 * x

    asked: list[str] = []
    runtime = JobRuntime(
        clock=FakeClock(start=100.0),
        function=lambda name: asked.append(name) or app.registry.get(name),
        record=lambda job_id: asked.append(job_id) or None,
        workflow=lambda ctx: asked.append(f"workflow of {ctx.job_id}") or app.runtime.workflow(ctx),
    )
    ctx = JobContext(runtime=runtime, app="not an app", job_id="j1", name="tests.job",
                     batch_id="b1")
    with activate(ctx):
        assert run_map(double.name, [1, 2, 3]) == [2, 4, 6]
        assert run_errback(double.name, [], {}, "gone") is None  # no such record: nothing runs
        assert ctx.workflow.id == "b1"
    assert asked == [double.name, "gone", "workflow of j1"]
    ctx.log("stamped")
    assert ctx.drain()[0][0].ts == 100.0


def test_without_a_runtime_a_job_reaches_nothing_beyond_itself(app: Conveyor) -> None:
    ctx = JobContext(app=app, job_id="j1", name="tests.job", batch_id="b1")
    with activate(ctx), pytest.raises(UnknownJobError, match="no job named"):
        run_map("tests.anything", [1])
    with pytest.raises(RuntimeError, match="needs the job to run in a conveyor app"):
        ctx.workflow  # noqa: B018 - the property raises


def test_the_runtime_follows_a_clock_set_on_the_app(app: Conveyor) -> None:
    later = FakeClock(start=5000.0)
    app.clock = later
    ctx = make_ctx(app)
    ctx.log("now")
    assert ctx.clock is later and ctx.drain()[0][0].ts == 5000.0
