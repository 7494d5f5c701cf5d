"""A caller-chosen job id is unique in the whole store, not per queue.

The expectation is BullMQ's for a custom ``jobId`` (docs "Job Ids": a job added with an id
that exists already is ignored, not added, and the existing job stands) and the store-wide
primary key of memory, SQLite and PostgreSQL: a second enqueue of an id stores nothing and
reports ``created=False`` under that id, whichever queue either call names. (asynq's
``TaskID`` conflicts only within a queue; conveyor's rule is one per store, on every store.)
"""

from __future__ import annotations

import json

from conveyor.core.job import JobState
from conveyor.storage import Backend
from conveyor.storage.blocks import JobBlock
from tests.conformance.helpers import spec


def _one_job(backend: Backend, job_id: str, queue: str) -> None:
    """``job_id`` is one job, of ``queue``: found by id, listed and counted once."""
    record = backend.get_job(job_id)
    assert record is not None and record.queue == queue
    assert backend.count_jobs() == 1
    assert [r.id for r in backend.list_jobs()] == [job_id]


def test_an_id_taken_in_another_queue_is_not_stored_again(backend: Backend) -> None:
    first = backend.enqueue([spec("alpha", job_id="invoice-42", args=[1])])[0]
    again = backend.enqueue([spec("beta", job_id="invoice-42", args=[2])])[0]
    assert (first.id, first.created) == ("invoice-42", True)
    assert (again.id, again.created) == ("invoice-42", False)
    _one_job(backend, "invoice-42", "alpha")
    record = backend.get_job("invoice-42")
    assert record is not None and json.loads(record.payload)["a"] == [1]  # the first stands


def test_a_scheduled_id_is_taken_in_every_queue(backend: Backend) -> None:
    later = backend.now() + 3600
    assert backend.enqueue([spec("alpha", job_id="report-7", run_at=later)])[0].created
    for queue, run_at in (("beta", later), ("gamma", None)):
        again = backend.enqueue([spec(queue, job_id="report-7", run_at=run_at)])[0]
        assert (again.id, again.created) == ("report-7", False)
    _one_job(backend, "report-7", "alpha")
    record = backend.get_job("report-7")
    assert record is not None and record.state is JobState.SCHEDULED


def test_a_bulk_call_leaves_out_ids_other_queues_hold(backend: Backend) -> None:
    """Several specs in one call (``enqueue``) and a block (``enqueue_block``, the bulk
    path's) each leave out the id another queue holds and store the rest."""
    backend.enqueue([spec("alpha", job_id="a-1"), spec("alpha", job_id="a-2")])
    mixed = backend.enqueue([spec("beta", job_id="a-1"), spec("beta", job_id="b-1"),
                             spec("gamma", job_id="a-2")])
    assert [(r.id, r.created) for r in mixed] == [("a-1", False), ("b-1", True),
                                                   ("a-2", False)]
    block = JobBlock(name="tests.noop", queue="gamma", ids=["a-2", "g-1"],
                     payloads=['{"a":[],"k":{}}'] * 2)
    assert [(r.id, r.created) for r in backend.enqueue_block(block)] == [("a-2", False),
                                                                         ("g-1", True)]
    queues = {job_id: backend.get_job(job_id) for job_id in ("a-1", "a-2", "b-1", "g-1")}
    assert {k: r.queue for k, r in queues.items() if r} == {
        "a-1": "alpha", "a-2": "alpha", "b-1": "beta", "g-1": "gamma"}
    assert backend.count_jobs() == 4
