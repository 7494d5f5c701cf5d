"""Resumable loops: ``current_job().iterate(...)`` (docs/durable.md, "Resumable loops").

Expectations from Sidekiq 7.3's iterable jobs and Shopify's job-iteration (the cursor is
saved as the loop goes; an interrupted job resumes at the saved cursor, so only the items
after it run again; cancel is checked between items) and Rails 8.1 continuations (a step's
cursor is passed back when the job resumes; a finished step is skipped).
"""

from __future__ import annotations

from typing import Any

from conveyor import Conveyor, JobState, current_job
from conveyor.testing import drain


def _record(app: Conveyor, job_id: str) -> Any:
    record = app.get_job(job_id)
    assert record is not None
    return record


def test_a_crash_resumes_at_the_last_checkpoint(app: Conveyor) -> None:
    """Items up to the last checkpoint never run again; those after it run again (at least
    once), and the loop ends with every item done."""
    seen: list[int] = []

    @app.job(name="t.reindex", retry=1, retry_in=lambda *_: 0)
    def reindex() -> int:
        ctx = current_job()
        for item in ctx.iterate(list(range(10)), every=3):
            seen.append(item)
            if item == 7 and ctx.attempt == 1:
                raise ConnectionError("search cluster gone")
        return len(seen)

    ref = reindex.enqueue()
    drain(app)
    # checkpoints after items 2 and 5 (every 3 done): the retry starts at item 6
    assert seen == [0, 1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9]
    record = _record(app, ref.id)
    assert record.state is JobState.SUCCEEDED and record.progress == (10, 10)


def test_a_function_source_resumes_after_its_cursor(mem: Conveyor) -> None:
    """Sidekiq's ``build_enumerator(cursor:)``: the source is asked for what comes after the
    saved cursor, which is read off each item (``cursor_key``)."""
    rows = [{"id": i * 10, "name": f"r{i}"} for i in range(6)]
    asked: list[Any] = []
    done: list[str] = []

    def rows_after(cursor: int | None) -> list[dict[str, Any]]:
        asked.append(cursor)
        return [r for r in rows if cursor is None or r["id"] > cursor]

    @mem.job(name="t.rows", retry=1, retry_in=lambda *_: 0)
    def job() -> None:
        ctx = current_job()
        for row in ctx.iterate(rows_after, cursor_key="id", every=2):
            done.append(row["name"])
            if row["id"] == 30 and ctx.attempt == 1:
                raise RuntimeError("boom")

    job.enqueue()
    drain(mem)
    assert asked == [None, 10]  # the checkpoint after r0, r1 (cursor 10); r2, r3 again
    assert done == ["r0", "r1", "r2", "r3", "r2", "r3", "r4", "r5"]


def test_pairs_give_their_own_cursor_and_a_finished_loop_is_skipped(mem: Conveyor) -> None:
    """Without a ``cursor_key`` the source yields (item, cursor) pairs; a loop that ended is
    not run again when the job replays (Rails: a completed step is skipped)."""
    done: list[str] = []

    @mem.job(name="t.pairs", retry=1, retry_in=lambda *_: 0)
    def job() -> None:
        ctx = current_job()
        for word in ctx.iterate(lambda cursor: [(w, i) for i, w in enumerate("abc")
                                                if cursor is None or i > cursor]):
            done.append(word)
        if ctx.attempt == 1:
            raise RuntimeError("after the loop")

    job.enqueue()
    drain(mem)
    assert done == ["a", "b", "c"]


def test_a_cancel_ends_the_loop_between_items_cancelled(mem: Conveyor) -> None:
    seen: list[int] = []

    @mem.job(name="t.cancelled")
    def job() -> None:
        ctx = current_job()
        for item in ctx.iterate(range(100), every=10):
            seen.append(item)
            if item == 4:
                ctx.request_cancel()  # as the worker does when a heartbeat reports it

    ref = job.enqueue()
    drain(mem)
    record = _record(mem, ref.id)
    assert record.state is JobState.CANCELLED and seen == [0, 1, 2, 3, 4]
    cursor = mem.storage.durable.read(ref.id).steps[0]
    assert (cursor.status, cursor.result) == ("cursor", "[4,5]")


def test_a_stopping_worker_hands_the_loop_back_at_its_checkpoint(mem: Conveyor) -> None:
    """Sidekiq: at shutdown the job saves its cursor and goes back to the queue; here it is
    put back pending (not an error attempt) and resumes after the last item done."""
    seen: list[int] = []

    @mem.job(name="t.stopped", retry=0)
    def job() -> None:
        ctx = current_job()
        for item in ctx.iterate(range(6), every=100):
            seen.append(item)
            if item == 2 and ctx.attempt == 1:
                ctx.request_stop()  # as the launcher does when it begins to stop

    ref = job.enqueue()
    assert drain(mem, max_jobs=1) == 1
    record = _record(mem, ref.id)
    assert record.state is JobState.PENDING and record.errors == 0
    assert record.events[-1].kind == "interrupted"
    drain(mem)
    assert seen == [0, 1, 2, 3, 4, 5]
    assert _record(mem, ref.id).state is JobState.SUCCEEDED
