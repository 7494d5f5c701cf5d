"""WAL checkpoints run in a checkpointer thread per process, not in the committing thread
(``storage/sqlite/checkpoint.py``): the WAL stays bounded through a long bulk enqueue,
committed jobs survive a kill -9 in the middle of one, and a forked child checkpoints with
a checkpointer and a connection of its own.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import threading
from pathlib import Path

import pytest

from conveyor.storage.blocks import JobBlock
from conveyor.storage.sqlite.checkpoint import SAFETY_PAGES, WAL_BYTES
from conveyor.storage.sqlite.storage import SqliteStorage, open_sqlite
from tests.faults.harness import wait_until

FORK = multiprocessing.get_context("fork")
BLOCK = 2000
# The WAL never holds more than the safety net's frames plus the transaction that crossed it.
WAL_BOUND = SAFETY_PAGES * (4096 + 24) + 2 * 1024 * 1024


def _block(k: int) -> JobBlock:
    return JobBlock(name="tests.noop", queue="bulk",
                    ids=[f"b{k:05d}-{i:04d}" for i in range(BLOCK)],
                    payloads=['{"a":["noop",0.0],"k":{}}'] * BLOCK)


def _wal_size(db: Path) -> int:
    try:
        return os.stat(f"{db}-wal").st_size
    except FileNotFoundError:
        return 0


def _checkpoints(store: SqliteStorage) -> int:
    checkpointer = store._db._checkpointer
    return 0 if checkpointer is None else checkpointer.checkpoints


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "conveyor-checkpoint"]


def test_the_committers_leave_checkpoints_to_the_checkpointer(tmp_path: Path) -> None:
    store = open_sqlite(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        before = len(_checkpoint_threads())
        store.enqueue_block(_block(0))
        conn = store._db.conn()
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == SAFETY_PAGES
        assert len(_checkpoint_threads()) == before + 1
        k = 1
        while _wal_size(tmp_path / "c.db") <= WAL_BYTES:
            store.enqueue_block(_block(k))
            k += 1
        wait_until(lambda: _checkpoints(store) > 0, 30, interval=0.01,
                   what="a checkpoint by the checkpointer")
    finally:
        store.close()
    assert len(_checkpoint_threads()) == before


def test_the_wal_stays_bounded_through_a_long_bulk_enqueue(tmp_path: Path) -> None:
    """80 blocks (160,000 jobs, over 11,000 WAL pages: past the checkpointer's threshold many
    times); the -wal file is below the bound after every block, and once writes go on after
    the bulk, it is cut back to the checkpointer's threshold."""
    db = tmp_path / "bulk.db"
    store = open_sqlite(f"sqlite:///{db}")
    try:
        sizes = []
        for k in range(80):
            store.enqueue_block(_block(k))
            sizes.append(_wal_size(db))
        assert max(sizes) < WAL_BOUND, sizes
        assert store.count_jobs() == 80 * BLOCK

        def shrunk() -> bool:  # the WAL starts over at a write after a full checkpoint
            store.enqueue_block(JobBlock(name="tests.noop", queue="more",
                                         ids=[os.urandom(8).hex() for _ in range(BLOCK)],
                                         payloads=["{}"] * BLOCK))
            return _wal_size(db) <= WAL_BYTES

        wait_until(shrunk, 30, interval=0.01, what="the -wal file to be cut back")
    finally:
        store.close()


def _bulk_forever(url: str, log: Path) -> None:
    store = open_sqlite(url)
    with log.open("a") as out:
        for k in range(10_000):
            store.enqueue_block(_block(k))
            out.write(f"{k}\n")
            out.flush()


@pytest.mark.slow
def test_jobs_survive_a_kill_9_in_the_middle_of_a_bulk_enqueue(tmp_path: Path) -> None:
    db = tmp_path / "killed.db"
    url = f"sqlite:///{db}"
    open_sqlite(url).close()
    log = tmp_path / "stored.log"
    log.touch()
    child = FORK.Process(target=_bulk_forever, args=(url, log))
    child.start()
    try:
        # past the checkpointer's threshold several times: checkpoints are under way
        wait_until(lambda: len(log.read_text().split()) >= 30, 120, interval=0.01,
                   what="30 blocks stored")
    finally:
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join()
    stored = [int(k) for k in log.read_text().split()]
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = {row[0] for row in con.execute("SELECT id FROM jobs WHERE queue = 'bulk'")}
    finally:
        con.close()
    for k in stored:  # every block the child saw committed is there, whole
        assert set(_block(k).ids) <= ids, k
    assert len(ids) % BLOCK == 0  # and no block is there in part


def _child_checkpoints(store: SqliteStorage, parent_checkpointer: object, out: Path) -> None:
    k = 0
    while _wal_size(store._db.path) <= WAL_BYTES:
        store.enqueue_block(_block(k))
        k += 1
    wait_until(lambda: _checkpoints(store) > 0, 30, interval=0.01, what="the child's checkpoint")
    mine = store._db._checkpointer
    threads = _checkpoint_threads()
    own = mine is not None and mine.pid == os.getpid()
    out.write_text(f"{mine is not parent_checkpointer} {own} {len(threads)}")
    store.close()


@pytest.mark.slow
def test_a_forked_child_checkpoints_with_its_own_checkpointer(tmp_path: Path) -> None:
    store = open_sqlite(f"sqlite:///{tmp_path / 'fork.db'}")
    try:
        store.enqueue_block(_block(99_999))
        parent = store._db._checkpointer
        assert parent is not None
        out = tmp_path / "child.txt"
        child = FORK.Process(target=_child_checkpoints, args=(store, parent, out))
        child.start()
        child.join(120)
        assert child.exitcode == 0
        assert out.read_text() == "True True 1"  # a new one, in the child, its only thread
        assert store._db._checkpointer is parent
        store.enqueue_block(_block(99_998))  # the parent goes on with its own
        assert parent._thread.is_alive()
    finally:
        store.close()


def _write_one_block(store: SqliteStorage, k: int) -> None:
    store.enqueue_block(_block(k))  # opens a connection: SQLite's mutexes must be free here
    store.close()


@pytest.mark.slow
def test_a_fork_while_the_checkpointer_is_at_work_leaves_the_child_a_usable_sqlite(
        tmp_path: Path) -> None:
    """The checkpointer runs inside SQLite with the GIL released; a fork at that moment must
    not hand the child one of SQLite's mutexes locked for ever (the child hung in malloc)."""
    url = f"sqlite:///{tmp_path / 'forks.db'}"
    for k in range(30):
        store = open_sqlite(url)  # its first commit starts a checkpointer: it opens a connection
        try:
            for j in range(1 + k % 8):  # and past WAL_FRAMES, it checkpoints
                store.enqueue_block(_block(k * 100 + j))
            child = FORK.Process(target=_write_one_block, args=(store, k * 100 + 99))
            child.start()
            child.join(30)
            if child.exitcode is None:
                child.kill()
            assert child.exitcode == 0, f"fork {k}: the child hung or failed"
        finally:
            store.close()
