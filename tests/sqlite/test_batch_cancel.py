"""SQLite cancel_batch in chunks of ``CANCEL_CHUNK`` jobs per transaction (issue #14, item 12):
a batch bigger than several chunks ends exactly as one transaction would have left it."""

from __future__ import annotations

from pathlib import Path

from conveyor.core.clock import FakeClock
from conveyor.core.ids import new_id
from conveyor.core.job import BatchSpec, JobSpec, JobState
from conveyor.storage import open_storage
from conveyor.storage.sqlite.inspect import CANCEL_CHUNK


def test_cancel_of_a_batch_bigger_than_a_chunk(tmp_path: Path) -> None:
    store = open_storage(f"sqlite:///{tmp_path / 'c.db'}", FakeClock())
    batch = new_id()
    store.create_batch(BatchSpec(id=batch))
    n = CANCEL_CHUNK * 2 + 7
    store.enqueue([JobSpec(id=new_id(), name="t", queue="default", payload="{}",
                           batch_id=batch, run_at=None if k % 5 else 1e12) for k in range(n)])
    store.close_batch(batch)
    (active,) = store.dequeue(["default"], "w", 1, 60.0)
    assert store.cancel_batch(batch) == n
    status = store.get_batch(batch)
    assert status is not None
    assert {k: v for k, v in status.counts.items() if v} == {"cancelled": n - 1, "active": 1}
    assert store.count_jobs(state=JobState.CANCELLED, batch_id=batch) == n - 1
    record = store.get_job(active.id)
    assert record is not None and record.cancel_requested
    assert store.dequeue(["default"], "w", n, 60.0) == []
    store.close()
