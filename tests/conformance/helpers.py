"""Small builders and readers the conformance tests share (black-box: public protocol only)."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from conveyor.core.clock import FakeClock
from conveyor.core.job import (
    Ack,
    ErrorInfo,
    Event,
    FlowControl,
    JobSpec,
    JobState,
    LeasedJob,
    Outcome,
)
from conveyor.storage import Backend, open_storage
from conveyor.storage.workers import WorkerInfo

_ids = itertools.count(1)


def new_job_id(prefix: str = "j") -> str:
    """Ids that sort in creation order, so "oldest first" is predictable on every backend."""
    return f"{prefix}{next(_ids):09d}"


def spec(
    queue: str = "default",
    *,
    name: str = "tests.noop",
    args: Sequence[Any] = (),
    job_id: str | None = None,
    flow: FlowControl | None = None,
    **options: Any,
) -> JobSpec:
    """A ``JobSpec`` with a small valid payload."""
    payload = json.dumps({"a": list(args), "k": {}}, separators=(",", ":"))
    return JobSpec(id=job_id or new_job_id(), name=name, queue=queue, payload=payload,
                   flow=flow, **options)


def put(store: Backend, queue: str = "default", **kwargs: Any) -> str:
    """Enqueue one job; returns its id (asserting it was created)."""
    result = store.enqueue([spec(queue, **kwargs)])[0]
    assert result.created
    return result.id


def take(store: Backend, queues: Sequence[str] = ("default",), *, count: int = 1,
         worker: str = "w1", lease: float = 30.0) -> list[LeasedJob]:
    """Dequeue up to ``count`` jobs."""
    return store.dequeue(list(queues), worker, count, lease)


def take_one(store: Backend, queues: Sequence[str] = ("default",), *, worker: str = "w1",
             lease: float = 30.0) -> LeasedJob:
    """Dequeue exactly one job (fails the test otherwise)."""
    jobs = take(store, queues, worker=worker, lease=lease)
    assert len(jobs) == 1, f"expected one job, got {len(jobs)}"
    return jobs[0]


def ack(store: Backend, job: LeasedJob, outcome: Outcome = Outcome.SUCCEEDED,
        **kwargs: Any) -> bool:
    """Acknowledge one leased job; returns whether the storage applied it."""
    return store.ack([Ack(job_id=job.id, token=job.token, outcome=outcome, **kwargs)])[0]


def boom(message: str = "boom") -> ErrorInfo:
    """An error as a worker reports it."""
    return ErrorInfo(type="ValueError", message=message,
                     traceback=f'Traceback (most recent call last):\nValueError: {message}\n')


def state_of(store: Backend, job_id: str) -> JobState:
    """The job's current state (the job must exist)."""
    record = store.get_job(job_id)
    assert record is not None, f"job {job_id} is missing"
    return record.state


def events_of(store: Backend, job_id: str) -> list[Event]:
    """The job's event log."""
    record = store.get_job(job_id)
    assert record is not None and record.events is not None
    return record.events


def kinds_of(store: Backend, job_id: str) -> list[str]:
    """Kinds of the job's events, in order."""
    return [e.kind for e in events_of(store, job_id)]


def last_event(store: Backend, job_id: str) -> Event:
    """The newest event of the job."""
    return events_of(store, job_id)[-1]


def worker_info(clock: FakeClock, worker_id: str = "w1", queues: Sequence[str] = ("default",),
                status: str = "running") -> WorkerInfo:
    """A worker as it reports itself in a heartbeat."""
    return WorkerInfo(id=worker_id, hostname="testhost", pid=4242, queues=tuple(queues),
                      concurrency=5, started_at=clock.now(), status=status)


def run_in_threads(target: Callable[[int], None], count: int) -> None:
    """Run ``target(i)`` in ``count`` threads at once; re-raise the first failure here."""
    errors: list[BaseException] = []

    def guarded(slot: int) -> None:
        try:
            target(slot)
        except BaseException as exc:  # a thread cannot fail the test itself: hand it over
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@contextmanager
def connections(store: Backend, clock: FakeClock, count: int) -> Iterator[list[Backend]]:
    """``count`` more connections to the same store, as separate worker processes would hold.

    ``memory://`` opens a new, empty store each time and has no second connection to give, so
    its threads share ``store`` itself; every other backend gets its own clients or files.
    """
    if store.url.startswith("memory:"):
        yield [store] * count
        return
    opened: list[Backend] = []
    try:
        opened.extend(open_storage(store.url, clock) for _ in range(count))
        yield opened
    finally:
        for other in opened:
            other.close()


def outcome_a_day(store: Backend, clock: FakeClock, days: int = 3) -> None:
    """One succeeded job on queue "hist" at the same minute of ``days`` days, the clock left
    at the last one (for the history's retention)."""
    for _ in range(days):
        put(store, "hist")
        assert ack(store, take_one(store, ["hist"]))
        clock.advance(24 * 3600.0)
    clock.advance(-24 * 3600.0)  # the last outcome's day


def periodic_ticks(store: Backend, queue: str = "cron") -> Counter[tuple[str, float]]:
    """(schedule, tick) of every stored periodic job of ``queue``, counted."""
    jobs = store.list_jobs(queue=queue, limit=10_000)
    return Counter((json.loads(j.payload)["m"]["periodic"], json.loads(j.payload)["m"]["tick"])
                   for j in jobs)


def to_next_minute(clock: FakeClock) -> None:
    """Move the clock just past the next whole minute (ticks fall on minutes)."""
    clock.advance(60 - clock.now() % 60 + 1)
