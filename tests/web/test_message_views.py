"""``message`` is one field, shown the same by the lists, the batch page and ``jobs show``."""

from __future__ import annotations

from conveyor import Conveyor, FakeClock
from conveyor.core.job import Ack, Event, EventKind, Outcome
from conveyor.views.records import batch_jobs_view, batch_view, job_row, job_view


def test_every_view_shows_the_jobs_message_and_nothing_else() -> None:
    clock = FakeClock()
    app = Conveyor("memory://", clock=clock)
    try:
        with app.batch() as batch:
            app.enqueue("tests.noop")
            app.enqueue("tests.noop")
        store = app.storage
        failed, recovered = store.dequeue(["default"], "w", 2, 10)
        store.ack([Ack(failed.id, failed.token, Outcome.FAILED, message="seller not qualified")])
        clock.advance(11)
        store.reclaim_expired()  # its last event says "lease expired": that is no outcome
        views = {}
        for job_id in (failed.id, recovered.id):
            record = app.get_job(job_id)
            assert record is not None
            rows = {r["id"]: r for r in batch_jobs_view(store, batch.id, None, 0, 10)}
            listed = {r.id: job_row(r) for r in store.list_jobs(limit=10)}
            views[job_id] = {rows[job_id]["message"], listed[job_id]["message"],
                             job_view(record)["message"], record.message}
        assert views == {failed.id: {"seller not qualified"}, recovered.id: {None}}
        [failure] = batch_view(store, batch.id)["failures"]
        assert failure["message"] == "seller not qualified"
    finally:
        app.close()


def test_a_running_job_shows_its_own_newest_line_everywhere() -> None:
    clock = FakeClock()
    app = Conveyor("memory://", clock=clock)
    try:
        with app.batch() as batch:
            app.enqueue("tests.noop")
        store = app.storage
        [job] = store.dequeue(["default"], "w", 1, 60)
        store.ack([Ack(job.id, job.token, Outcome.RETRY, message="db down", retry_in=0)])
        store.promote_due()
        [job] = store.dequeue(["default"], "w", 1, 60)
        record = app.get_job(job.id)
        assert record is not None  # no line logged by this attempt yet: its last outcome
        assert job_view(record)["message"] == "db down"
        store.log(job.id, job.token, [Event(ts=clock.now(), kind=EventKind.MESSAGE,
                                            message="row 40 of 100")])
        record = app.get_job(job.id)
        assert record is not None
        [row] = batch_jobs_view(store, batch.id, None, 0, 10)
        assert row["message"] == job_view(record)["message"] == "row 40 of 100"
    finally:
        app.close()
