"""Damaged rows on SQLite (issue #14, item 6): written for real with a raw sqlite3 connection
(``CAST(x'..' AS TEXT)`` stores bytes that are not UTF-8 in a TEXT column). The Inspector lists
and shows each such job, marked unreadable, and operators can delete it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.ids import new_id
from conveyor.core.job import JobSpec, JobState, LeasedJob, Outcome
from conveyor.storage import Backend, open_storage
from tests.conformance.helpers import ack

BAD = "CAST(x'6f6bff' AS TEXT)"  # "ok" and a byte that is not UTF-8
DAMAGES = {
    "name": f"name = {BAD}",
    "payload": f"payload = {BAD}",
    "message": f"message = {BAD}",
    "worker": f"worker = {BAD}",
    "batch id": f"batch_id = {BAD}",
    "events": f"events = events || {BAD}",
    "result not JSON": "result = '{\"trunc'",
    "state": "state = 'garbled'",
    "progress": "progress = 'x'",
    "flow": "flow = '{'",
    "a number as text": "attempt = 'many'",
}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Backend, Path]]:
    """A SQLite store and its file."""
    path = tmp_path / "conveyor.db"
    store = open_storage(f"sqlite:///{path}", FakeClock())
    yield store, path
    store.close()


def _finished(store: Backend, n: int) -> list[str]:
    ids = [new_id() for _ in range(n)]
    store.enqueue([JobSpec(id=i, name="t", queue="default", payload='{"a":[]}') for i in ids])
    jobs: list[LeasedJob] = store.dequeue(["default"], "w", n, 60.0)
    for job in jobs:
        assert ack(store, job, Outcome.DEAD)
    return ids


def _damage(path: Path, job_id: str, assignment: str) -> None:
    raw = sqlite3.connect(path)
    with raw:
        raw.execute(f"UPDATE jobs SET {assignment} WHERE id = ?", (job_id,))
    raw.close()


@pytest.mark.parametrize("damage", list(DAMAGES), ids=list(DAMAGES))
def test_a_damaged_row_is_listed_shown_and_deleted(db: tuple[Backend, Path], damage: str
                                                   ) -> None:
    store, path = db
    ids = _finished(store, 5)
    bad = ids[2]
    _damage(path, bad, DAMAGES[damage])

    record = store.get_job(bad)
    assert record is not None and record.unreadable, record
    assert record.as_dict()["unreadable"] == record.unreadable
    for with_events in (False, True):
        listed = {r.id: r for r in store.list_jobs(limit=50, with_events=with_events)}
        assert set(listed) == set(ids)
        assert listed[bad].unreadable or (damage == "events" and not with_events)
        assert all(r.unreadable is None for i, r in listed.items() if i != bad)
    assert store.count_jobs() == 5
    assert {r.id for r in store.list_jobs(state=JobState.DEAD, limit=50)} >= set(ids) - {bad}
    store.retry_jobs([bad])  # allowed or refused, never an error
    store.kill_jobs([bad])
    assert store.delete_jobs([bad]) == 1
    assert store.get_job(bad) is None
    assert {r.id for r in store.list_jobs(limit=50)} == set(ids) - {bad}
