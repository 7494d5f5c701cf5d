"""The storage is opened lazily, and again in a child process after fork."""

from __future__ import annotations

import os
from pathlib import Path

from conveyor import Conveyor, FakeClock


def test_storage_is_opened_on_first_use(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/lazy.db")
    assert not (tmp_path / "lazy.db").exists()
    assert app.storage is app.storage
    app.close()


def test_a_forked_child_opens_its_own_storage(tmp_path: Path, clock: FakeClock) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/t.db", clock=clock)

    @app.job
    def job(n: int) -> None: ...

    parent_storage = app.storage
    assert job.enqueue(1) is not None
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return into pytest
        code = 1
        try:
            if app.storage is not parent_storage and job.enqueue(2) is not None:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert app.storage is parent_storage
    assert sorted(r.args[0] for r in app.storage.list_jobs()) == [1, 2]
    app.close()


def test_a_forked_child_enqueues_in_bulk_after_its_parent(tmp_path: Path,
                                                          clock: FakeClock) -> None:
    """The parent's threads that store bulk blocks do not exist in a child: it starts its own."""
    app = Conveyor(f"sqlite:///{tmp_path}/bulk.db", clock=clock)

    @app.job
    def job(n: int) -> None: ...

    assert job.enqueue_many(([n] for n in range(5_000)), return_refs=False) == 5_000
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return into pytest
        code = 1
        try:
            if job.enqueue_many(([n] for n in range(5_000, 10_000)), return_refs=False) == 5_000:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert job.enqueue_many([[n] for n in range(10_000, 14_000)], return_refs=False) == 4_000
    assert app.storage.count_jobs() == 14_000
    app.close()
