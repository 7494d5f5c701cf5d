"""A row whose text is not UTF-8 (written by another program) is leased alone as unreadable and
acked dead with the reason; the jobs fetched with it run, and the queue keeps moving."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.core.job import Ack
from conveyor.storage.outbox import as_outbox
from conveyor.worker.acker import Acker
from conveyor.worker.config import WorkerConfig
from conveyor.worker.processor import Processor


@pytest.mark.parametrize("column", ["payload", "name", "batch_id"])
@pytest.mark.parametrize("take", ["dequeue", "start"])
def test_a_row_that_is_not_utf8_dies_alone_with_the_reason(tmp_path: Path, column: str,
                                                           take: str) -> None:
    """``start`` (a broker's deliveries) as ``dequeue``: a name that was not UTF-8 made the
    whole call raise there, so every fetch of every broker-fed worker failed."""
    path = tmp_path / "bad.db"
    app = Conveyor(f"sqlite:///{path}", clock=FakeClock())

    @app.job(name="t.ok")
    def ok() -> str:
        return "ok"

    refs = [ok.enqueue() for _ in range(5)]
    bad = refs[2].id
    with sqlite3.connect(path) as raw:  # another program writes bytes that are not UTF-8
        raw.execute(f"UPDATE jobs SET {column} = CAST(X'7b22ff80fe22' AS TEXT) WHERE id = ?",
                    (bad,))
    processor = Processor(app, "w", app.clock)
    acker = Acker(app.storage, app.clock, WorkerConfig(concurrency=1, worker_id="w"))
    if take == "dequeue":
        jobs = app.storage.dequeue(["default"], "w", 10, 30.0)
    else:
        replies = as_outbox(app.storage).start("default", [(r.id, False) for r in refs], "w",
                                               30.0)
        jobs = [reply.job for reply in replies if reply.job is not None]
    assert sorted(j.id for j in jobs) == sorted(r.id for r in refs)
    [unreadable] = [j for j in jobs if j.unreadable is not None]
    assert unreadable.id == bad and column in unreadable.unreadable  # type: ignore[operator]
    for job in jobs:
        prepared = processor.prepare(job)
        acker.add(prepared if isinstance(prepared, Ack) else processor.run(prepared))
    assert acker.tick() == 5 and len(acker) == 0
    for ref in refs:
        if ref.id != bad:  # the Inspector's own handling of a damaged row is tested elsewhere
            record = app.storage.get_job(ref.id)
            assert record is not None and record.state is JobState.SUCCEEDED
    with sqlite3.connect(path) as raw:
        state, message = raw.execute("SELECT state, CAST(message AS BLOB) FROM jobs WHERE id = ?",
                                     (bad,)).fetchone()
    assert state == "dead" and message.decode().startswith("unreadable: ")
    assert app.storage.dequeue(["default"], "w", 10, 30.0) == []
    app.close()


@pytest.mark.parametrize("column", ["name", "batch_id"])
@pytest.mark.parametrize("how", ["lease expiry", "worker released", "redelivered"])
def test_an_active_row_that_is_not_utf8_never_stops_the_others_being_recovered(
        tmp_path: Path, column: str, how: str) -> None:
    """Recovery reads the rows it moves; one damaged row made the whole read raise, so no
    expired lease of any job was ever reclaimed again (nor a dead worker's jobs released)."""
    path = tmp_path / "bad.db"
    clock = FakeClock()
    app = Conveyor(f"sqlite:///{path}", clock=clock)

    @app.job(name="t.ok")
    def ok() -> str:
        return "ok"

    refs = [ok.enqueue() for _ in range(4)]
    jobs = app.storage.dequeue(["default"], "w", 10, 30.0)
    assert len(jobs) == 4
    bad = refs[1].id
    with sqlite3.connect(path) as raw:
        raw.execute(f"UPDATE jobs SET {column} = CAST(X'7b22ff80fe22' AS TEXT) WHERE id = ?",
                    (bad,))
    if how == "lease expiry":
        clock.advance(31)
        app.storage.reclaim_expired(max_recoveries=5)
    elif how == "worker released":
        app.storage.release_worker("w", max_recoveries=5)
    else:
        as_outbox(app.storage).start("default", [(r.id, True) for r in refs], "w2", 30.0)
    for ref in refs:
        if ref.id == bad:
            continue
        record = app.storage.get_job(ref.id)
        assert record is not None and record.recoveries == 1, (ref.id, record)
    app.close()
