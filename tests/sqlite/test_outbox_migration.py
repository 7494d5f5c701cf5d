"""Migration 005 (the outbox's ``publish_at``) on a database written before it existed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conveyor.core.clock import FakeClock
from conveyor.core.job import JobState
from conveyor.storage.sqlite.migrate import latest_version, migrations, split_statements
from conveyor.storage.sqlite.storage import open_sqlite
from tests.conformance.helpers import spec, state_of, take_one


def test_an_older_database_keeps_every_job_and_its_pending_jobs_are_due(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for number, _name, script in migrations():
        if number <= 4:  # the schema as conveyor shipped it before the outbox
            for statement in split_statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number:d}")
    specs = [spec(), spec()]
    conn.executemany(  # the columns the version-4 code wrote for a plain pending job
        "INSERT INTO jobs (id, name, queue, payload, state, created_at, ready_at, events) "
        "VALUES (?, ?, ?, ?, 'pending', 1.0, 1.0, '')",
        [(s.id, s.name, s.queue, s.payload) for s in specs])
    conn.close()

    store = open_sqlite(f"sqlite:///{path}", FakeClock())
    try:
        with sqlite3.connect(path) as check:
            assert check.execute("PRAGMA user_version").fetchone()[0] == latest_version() >= 5
        assert [state_of(store, s.id) for s in specs] == [JobState.PENDING] * 2
        assert take_one(store).id == specs[0].id  # dequeue works as before
        assert store.publish_due("default", 10, 30.0) == [specs[1].id]  # and it is due
    finally:
        store.close()
