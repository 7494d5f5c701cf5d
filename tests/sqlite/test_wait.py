"""``wait`` on SQLite: woken by commits of other connections, not by work it cannot take."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from conveyor.core.clock import FakeClock
from conveyor.core.job import JobSpec
from conveyor.storage.sqlite import storage as sqlite_storage
from conveyor.storage.sqlite.storage import open_sqlite


def _spec(job_id: str, queue: str) -> JobSpec:
    return JobSpec(id=job_id, name="tests.noop", queue=queue, payload='{"a":[],"k":{}}')


def test_work_on_a_paused_queue_does_not_wake_the_waiter(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'paused.db'}"
    store = open_sqlite(url, FakeClock())
    store.pause_queue("held")
    other = open_sqlite(url, FakeClock())  # its enqueues do not notify ``store``'s waiters
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(store.wait(["held"], 0.5)))
    waiter.start()
    for i in range(10):
        other.enqueue([_spec(f"p{i}", "held")])
    waiter.join()
    assert woke == [False]
    woke.clear()
    other.resume_queue("held")
    waiter = threading.Thread(target=lambda: woke.append(store.wait(["held"], 30.0)))
    waiter.start()
    for i in range(600):  # the waiter may not be blocked yet: keep committing until it wakes
        other.enqueue([_spec(f"r{i}", "held")])
        waiter.join(0.05)
        if not waiter.is_alive():
            break
    waiter.join()
    assert woke == [True]
    store.close()
    other.close()


def test_a_commit_between_an_empty_dequeue_and_wait_is_not_missed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    store = open_sqlite(url, FakeClock())
    other = open_sqlite(url, FakeClock())
    assert store.dequeue(["q"], "w", 10, 30.0) == []
    other.enqueue([_spec("late", "q")])  # lands before this thread starts waiting
    assert store.wait(["q"], 0.0) is True
    assert [j.id for j in store.dequeue(["q"], "w", 10, 30.0)] == ["late"]
    assert store.dequeue(["q"], "w", 10, 30.0) == []
    assert store.wait(["q"], 0.0) is False
    store.close()
    other.close()


def test_a_commit_landing_as_an_empty_dequeue_ends_is_not_missed(tmp_path: Path,
                                                                   monkeypatch: Any) -> None:
    """The dequeue reads what it compares later (``data_version``, the wake-up count) when
    it starts: a commit then, by another connection or by this process (a workflow's node
    released by an ack of this worker), is either leased by that dequeue or wakes the next
    wait at once. Read when the dequeue ended, it was missed until the wait timed out (1 s
    per step of a chain)."""
    url = f"sqlite:///{tmp_path / 'race.db'}"
    store = open_sqlite(url, FakeClock())
    other = open_sqlite(url, FakeClock())
    real = sqlite_storage.data_version
    for n, committer in enumerate((other, store)):
        injected: list[str] = []

        def racing(conn: Any, committer: Any = committer, n: int = n,
                   injected: list[str] = injected) -> int:
            if not injected:  # the first read this dequeue makes: a commit lands there
                injected.append(f"j{n}")
                committer.enqueue([_spec(f"j{n}", "q")])
            return real(conn)

        monkeypatch.setattr(sqlite_storage, "data_version", racing)
        got = [j.id for j in store.dequeue(["q"], "w", 10, 30.0)]
        monkeypatch.setattr(sqlite_storage, "data_version", real)
        assert injected == [f"j{n}"]
        if not got:
            assert store.wait(["q"], 0.0) is True, "a job committed meanwhile was missed"
            got = [j.id for j in store.dequeue(["q"], "w", 10, 30.0)]
        assert got == [f"j{n}"]
    store.close()
    other.close()


def test_a_commit_after_a_dequeue_that_ran_dry_wakes_the_next_wait(tmp_path: Path) -> None:
    """A dequeue that leased fewer jobs than asked is what a worker's wait follows (the
    queues ran dry): a commit before that wait starts, by another connection or by this
    process (its ack releasing a workflow's next step), wakes it at once. Missed, each step
    of a chain waited for the idle timeout."""
    url = f"sqlite:///{tmp_path / 'dry.db'}"
    store = open_sqlite(url, FakeClock())
    other = open_sqlite(url, FakeClock())
    for n, committer in enumerate((other, store)):
        store.enqueue([_spec(f"first{n}", "q")])
        assert [j.id for j in store.dequeue(["q"], "w", 10, 30.0)] == [f"first{n}"]
        committer.enqueue([_spec(f"next{n}", "q")])  # before this thread starts waiting
        assert store.wait(["q"], 0.0) is True
        assert [j.id for j in store.dequeue(["q"], "w", 10, 30.0)] == [f"next{n}"]
    store.close()
    other.close()


def test_a_waiter_polls_briskly_only_while_work_keeps_coming(tmp_path: Path) -> None:
    """Another process's commit is seen by polling ``data_version`` (issue 53: the poll was
    most of an idle SQLite worker's latency). Within ``BRISK_SECONDS`` of a wait that found
    work the poll is ``BRISK_POLL_SECONDS``; a worker idle longer polls at ``POLL_SECONDS``,
    as before, so an idle worker costs no more CPU (River and Oban fall back to polling the
    same way when no notification comes)."""
    from conveyor.storage.sqlite import wakeup

    conn = sqlite3.connect(tmp_path / "poll.db", check_same_thread=False)
    bell = wakeup.Wakeup()
    assert bell.interval(time.monotonic()) == wakeup.POLL_SECONDS  # never found work
    before = time.monotonic()
    # work committed since the last empty dequeue (``seen`` differs): found at once
    assert bell.wait(lambda: conn, lambda: True, 5.0, seen=(-1, -1)) is True
    after = time.monotonic()
    assert bell.interval(before + 0.99 * wakeup.BRISK_SECONDS) == wakeup.BRISK_POLL_SECONDS
    assert bell.interval(after + wakeup.BRISK_SECONDS) == wakeup.POLL_SECONDS
    assert bell.wait(lambda: conn, lambda: False, 0.0) is False  # found none: no change
    assert bell.interval(after + wakeup.BRISK_SECONDS) == wakeup.POLL_SECONDS
    conn.close()


def test_a_dequeue_that_leased_jobs_makes_the_next_wait_brisk(tmp_path: Path) -> None:
    """A worker that drained a backlog with plain dequeues (no wait found the work) polls
    briskly when it next waits: the work was found by its leases."""
    from conveyor.storage.sqlite import wakeup

    store = open_sqlite(f"sqlite:///{tmp_path / 'drain.db'}", FakeClock())
    bell = store._wakeup  # the store's own wake-up: what its waits poll at
    assert store.dequeue(["q"], "w", 10, 30.0) == []  # nothing leased: no change
    assert bell.interval(time.monotonic()) == wakeup.POLL_SECONDS
    store.enqueue([_spec("backlog", "q")])
    before = time.monotonic()
    assert [j.id for j in store.dequeue(["q"], "w", 10, 30.0)] == ["backlog"]
    assert bell.interval(before + 0.99 * wakeup.BRISK_SECONDS) == wakeup.BRISK_POLL_SECONDS
    store.close()
