"""Running one job through the real ``Processor`` by hand, as the fetcher and a pool thread do."""

from __future__ import annotations

import asyncio

from conveyor import Conveyor
from conveyor.core.job import Ack, JobRecord
from conveyor.worker.inflight import Entry
from conveyor.worker.processor import Processor


def lease_one(app: Conveyor, processor: Processor, queue: str = "default") -> Entry | Ack:
    """Lease the next job and prepare it (an ``Ack`` when it cannot run)."""
    [job] = app.storage.dequeue([queue], processor.worker_id, 1, 10.0)
    return processor.prepare(job)


def run_one(app: Conveyor, queue: str = "default") -> tuple[Ack, JobRecord]:
    """Lease, run and acknowledge the next job; return the ack and the stored record."""
    processor = Processor(app, "test-worker", app.clock)
    prepared = lease_one(app, processor, queue)
    if isinstance(prepared, Ack):
        ack = prepared
    elif prepared.fn.is_async:
        ack = asyncio.run(processor.run_async(prepared))
    else:
        ack = processor.run(prepared)
    assert app.storage.ack([ack]) == [True]
    record = app.get_job(ack.job_id)
    assert record is not None
    return ack, record
