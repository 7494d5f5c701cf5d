"""The API through the real processor path (``conveyor.testing.drain``) on a SQLite file."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, Fail, JobRef, JobState, current_job
from conveyor.core.job import EventKind
from conveyor.errors import JobFailed
from conveyor.testing import drain


def test_a_batch_that_grows_from_inside_and_fires_its_callbacks(app: Conveyor) -> None:
    finished: list[str] = []

    @app.job(name="split")
    def split(parts: int) -> int:
        ctx = current_job()
        ctx.log("splitting", parts=parts)
        with app.batch(ctx.batch_id) as again:
            part.enqueue_many([[n] for n in range(parts)])
        ctx.progress(parts, parts)
        return again.enqueue_count

    @app.job(name="part")
    async def part(n: int) -> int:
        if n == 2:
            raise Fail(f"part {n} is not allowed")
        return n * 10

    @app.job(name="report")
    def report(batch_id: str) -> None:
        finished.append(batch_id)

    with app.batch(description="grow", on_complete=report, on_success=report) as batch:
        ref = split.enqueue(4)
    assert ref is not None
    assert drain(app) == 1 + 4 + 1  # split, its four parts, the complete callback
    assert finished == [batch.id]  # one part failed: no success callback
    assert ref.result(timeout=5) == 4
    record = ref.status()
    assert record is not None and record.progress == (4, 4)
    messages = [e.message for e in record.events or [] if e.kind == EventKind.MESSAGE]
    assert messages == ["splitting"]
    status = app.batch_status(batch.id)
    assert (status["total"], status["complete"], status["counts"]["succeeded"]) == (5, True, 4)
    assert [(f["args"], f["message"]) for f in status["failures"]] == [
        ([2], "part 2 is not allowed")]
    [failed] = app.batch_jobs(batch.id, state=JobState.FAILED)
    with pytest.raises(JobFailed, match="ended failed: part 2 is not allowed"):
        JobRef(failed.id, source=app).result(timeout=1)
