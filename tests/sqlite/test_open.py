"""Opening SQLite files: URLs, clear errors, migrations from empty and on re-open."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import JobSpec, JobState
from conveyor.errors import StorageUnavailable, StorageURLError
from conveyor.storage import Inspector, Storage, open_storage
from conveyor.storage.sqlite.migrate import latest_version, migrate, split_statements
from conveyor.storage.sqlite.storage import open_sqlite


def _spec(job_id: str) -> JobSpec:
    return JobSpec(id=job_id, name="tests.noop", queue="default", payload='{"a":[],"k":{}}')


def test_fresh_file_is_migrated_to_the_latest_version(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    store = open_sqlite(f"sqlite:///{path}", FakeClock())
    assert isinstance(store, Storage) and isinstance(store, Inspector)
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version() >= 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"jobs", "batches", "queues", "workers", "job_totals"} <= tables


def test_reopen_keeps_data_and_does_not_migrate_twice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'again.db'}"
    first = open_storage(url, FakeClock())
    first.enqueue([_spec("j1")])
    first.close()
    second = open_storage(url, FakeClock())
    record = second.get_job("j1")
    assert record is not None and record.state is JobState.PENDING
    conn = sqlite3.connect(tmp_path / "again.db")
    assert migrate(conn) == latest_version()
    second.close()
    second.close()  # idempotent


def test_relative_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    open_storage("sqlite:///sub.db", FakeClock()).close()
    assert (tmp_path / "sub.db").exists()


def test_missing_directory_names_the_directory(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable, match="does not exist"):
        open_storage(f"sqlite:///{tmp_path / 'nope' / 'x.db'}", FakeClock())


def test_a_directory_is_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable, match="is a directory"):
        open_storage(f"sqlite:///{tmp_path}", FakeClock())


def test_a_file_as_parent_directory(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(StorageUnavailable, match="not a directory"):
        open_storage(f"sqlite:///{tmp_path / 'plain' / 'x.db'}", FakeClock())


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageUnavailable, match=r"junk\.db"):
        open_storage(f"sqlite:///{tmp_path / 'junk.db'}", FakeClock())


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(StorageUnavailable, match="not writable"):
        open_storage(f"sqlite:///{locked / 'x.db'}", FakeClock())


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("sqlite://host/x.db", "host part"),
        ("sqlite:///", "names no file"),
        ("sqlite:///:memory:", "memory://"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, reason: str) -> None:
    with pytest.raises(StorageURLError, match=reason):
        open_storage(url, FakeClock())


def test_statements_are_split_whole() -> None:
    script = "-- header\nCREATE TABLE a (x TEXT DEFAULT ';');\n\nCREATE INDEX i ON a (x);\n"
    assert split_statements(script) == [
        "-- header\nCREATE TABLE a (x TEXT DEFAULT ';');", "CREATE INDEX i ON a (x);"
    ]
    with pytest.raises(ValueError, match="incomplete"):
        split_statements("CREATE TABLE b (x")
