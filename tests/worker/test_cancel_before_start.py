"""A cancel that arrives between a job's lease and its start: the job does not run.

The heartbeat cancels a running async job by cancelling its task; a cancel that came before
the task existed (the job leased, prepared, waiting for its slot or its crossing into the
loop) only marked the job's context, and the job then ran its whole body before being
recorded ``cancelled``. Expectations: Celery's ``revoke`` (a revoked task a worker receives
is discarded, not executed), RQ's ``cancel`` and asynq's ``CancelProcessing`` of a task not
yet started — none of them runs the body."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import Conveyor, JobState
from conveyor.core.job import Outcome
from conveyor.worker.inflight import Entry
from conveyor.worker.processor import Processor
from tests.worker.helpers import lease_one


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_job_cancelled_before_it_starts_does_not_run(app: Conveyor, kind: str) -> None:
    ran: list[str] = []

    if kind == "sync":
        @app.job(name="body")
        def body() -> None:
            ran.append("sync")
    else:
        @app.job(name="body")
        async def abody() -> None:
            ran.append("async")

    app.enqueue("body")
    processor = Processor(app, "test-worker", app.clock)
    entry = lease_one(app, processor)
    assert isinstance(entry, Entry)
    entry.ctx.request_cancel()  # as the heartbeat does when the store reports the request
    ack = (asyncio.run(processor.run_async(entry)) if entry.fn.is_async
           else processor.run(entry))
    assert ran == []
    assert ack.outcome is Outcome.CANCELLED and ack.message == "cancelled before it started"
    assert app.storage.ack([ack]) == [True]
    record = app.get_job(entry.job.id)
    assert record is not None and record.state is JobState.CANCELLED
