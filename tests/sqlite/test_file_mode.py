"""Database files are created owner-only (0600) unless the URL asks for ``file_mode=``."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.core.job import JobSpec
from conveyor.errors import StorageURLError
from conveyor.storage import Backend, open_storage


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual 022 umask, under which files were created 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _modes(path: Path) -> dict[str, int]:
    return {suffix: stat.S_IMODE(os.stat(f"{path}{suffix}").st_mode)
            for suffix in ("", "-wal", "-shm")}


def _open_and_write(url: str) -> Backend:
    store = open_storage(url)
    store.enqueue([JobSpec(id="j1", name="n", queue="q", payload='{"a":[],"k":{}}')])
    return store


@pytest.mark.usefixtures("loose_umask")
def test_new_database_and_its_wal_and_shm_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = _open_and_write(f"sqlite:///{path}")
    try:
        assert _modes(path) == {"": 0o600, "-wal": 0o600, "-shm": 0o600}
    finally:
        store.close()


@pytest.mark.usefixtures("loose_umask")
def test_file_mode_in_the_url_is_applied_exactly(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    old = os.umask(0o077)  # the mode asked for wins over a narrower umask too
    try:
        store = _open_and_write(f"sqlite:///{path}?file_mode=0640")
    finally:
        os.umask(old)
    try:
        assert _modes(path) == {"": 0o640, "-wal": 0o640, "-shm": 0o640}
    finally:
        store.close()


def test_an_existing_file_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    path.touch()
    path.chmod(0o660)
    store = _open_and_write(f"sqlite:///{path}")
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
    finally:
        store.close()


@pytest.mark.parametrize("value", ["rw", "0999", "0400", "01777", "0044"])
def test_bad_file_mode_is_a_url_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(StorageURLError, match="file_mode="):
        open_storage(f"sqlite:///{tmp_path / 'x.db'}?file_mode={value}")
    assert not (tmp_path / "x.db").exists()
