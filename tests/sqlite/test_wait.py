"""``wait`` on SQLite: woken by commits of other connections, not by work it cannot take."""

from __future__ import annotations

import threading
from pathlib import Path

from conveyor.clock import FakeClock
from conveyor.job import JobSpec
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
