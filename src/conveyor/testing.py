"""Helpers for users' tests: run queued jobs in the calling thread, through the real path.

::

    app = Conveyor("memory://")
    send_welcome.enqueue(42)
    assert drain(app) == 1

``drain`` leases each job, runs it through the same ``Processor`` a worker uses (payload
decoding, middleware, outcome mapping) and acknowledges it, so retries, ``Fail`` and batch
counters behave exactly as in production.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from conveyor.app import Conveyor
from conveyor.core.job import Ack, LeasedJob, Outcome
from conveyor.storage import Backend
from conveyor.worker.processor import Processor

__all__ = ["drain"]

_WORKER_ID = "conveyor.testing.drain"


def _queues(app: Conveyor) -> list[str]:
    names = {fn.opts.queue for fn in (app.registry.get(n) for n in app.registry.names()) if fn}
    names.update(q.name for q in app.storage.queues())
    return sorted(names)


def drain(app: Conveyor, queues: Sequence[str] | None = None, max_jobs: int | None = None) -> int:
    """Run every pending (and due scheduled/retrying) job of ``queues`` (default: all); jobs
    the run enqueues are run too. Returns how many jobs ran. Stops after ``max_jobs``."""
    storage = app.storage
    processor = Processor(app, _WORKER_ID, app.clock)
    names = list(queues) if queues is not None else _queues(app)
    ran = 0
    while max_jobs is None or ran < max_jobs:
        storage.promote_due()
        # one job at a time, of any cost a registered job declares (docs/scheduling.md)
        jobs = storage.dequeue(names, _WORKER_ID, _largest_cost(app), 60.0)
        if not jobs and queues is None:
            fresh = _queues(app)  # a job may have enqueued into a queue not seen before
            if set(fresh) != set(names):
                names = fresh
                continue
        if not jobs:
            break
        for job in jobs:  # a lease of several cheap jobs: each runs in turn
            if max_jobs is not None and ran >= max_jobs:  # handed back, not run
                storage.ack([Ack(job.id, job.token, Outcome.INTERRUPTED)])
                continue
            _run(processor, storage, job)
            ran += 1
    return ran


def _largest_cost(app: Conveyor) -> int:
    costs = [fn.opts.cost for fn in (app.registry.get(n) for n in app.registry.names()) if fn]
    return max([1, *costs])


def _run(processor: Processor, storage: Backend, job: LeasedJob) -> None:
    prepared = processor.prepare(job)
    if isinstance(prepared, Ack):
        ack = prepared
    elif prepared.fn.is_async:
        ack = asyncio.run(processor.run_async(prepared))
    else:
        ack = processor.run(prepared)
    storage.ack(ack.flatten())
