"""The per-minute outcome history (``Inspector.history``): what each outcome adds, where,
and for how long it is kept."""

from __future__ import annotations

from conveyor.core.clock import FakeClock
from conveyor.core.job import Outcome
from conveyor.storage import Backend, Retention
from conveyor.storage.totals import HISTORY_MINUTES, MinuteTotals, minute_of
from tests.conformance.helpers import ack, boom, put, take, take_one


def _counts(backend: Backend, **kwargs: object) -> dict[tuple[str, int], tuple[int, ...]]:
    rows = backend.history(**kwargs)  # type: ignore[arg-type]
    assert rows == sorted(rows, key=lambda r: (r.minute, r.queue)), "oldest first"
    return {(r.queue, r.minute): (r.processed, r.failed, r.dead, r.retried) for r in rows}


def test_each_outcome_counts_in_its_queue_and_minute(backend: Backend, clock: FakeClock) -> None:
    for _ in range(5):
        put(backend, "hq1")
    put(backend, "hq2")
    first = minute_of(clock.now())
    jobs = take(backend, ["hq1"], count=5)
    assert ack(backend, jobs[0]) and ack(backend, jobs[1])
    assert ack(backend, jobs[2], Outcome.FAILED, message="no")
    assert ack(backend, jobs[3], Outcome.DEAD, error=boom())
    assert ack(backend, jobs[4], Outcome.RETRY, error=boom(), retry_in=600)
    assert ack(backend, take_one(backend, ["hq2"]))
    clock.advance(125)
    later = minute_of(clock.now())
    put(backend, "hq1")
    assert ack(backend, take_one(backend, ["hq1"]))
    assert _counts(backend) == {
        ("hq1", first): (2, 1, 1, 1), ("hq2", first): (1, 0, 0, 0), ("hq1", later): (1, 0, 0, 0),
    }
    assert _counts(backend, queue="hq2") == {("hq2", first): (1, 0, 0, 0)}
    assert _counts(backend, since=first + 1) == {("hq1", later): (1, 0, 0, 0)}
    assert isinstance(backend.history()[0], MinuteTotals)


def test_dead_by_recovery_and_by_kill_count(backend: Backend, clock: FakeClock) -> None:
    held = put(backend, "hk")
    killed = put(backend, "hk", run_at=clock.now() + 600)
    take_one(backend, ["hk"], lease=5)
    clock.advance(10)
    assert backend.reclaim_expired(max_recoveries=0) == 1
    assert backend.kill_jobs([killed]) == 1
    assert held != killed
    assert _counts(backend, queue="hk") == {("hk", minute_of(clock.now())): (0, 0, 2, 0)}
    stats = {q.name: q for q in backend.queues()}["hk"]
    assert (stats.failed, stats.dead, stats.failed_today) == (2, 2, 2)


def test_a_day_later_the_minute_is_gone_and_counts_start_again(
        backend: Backend, clock: FakeClock) -> None:
    put(backend, "hd")
    put(backend, "hd")
    assert ack(backend, take_one(backend, ["hd"]))
    old = minute_of(clock.now())
    clock.advance(HISTORY_MINUTES * 60)  # the same minute of the next day
    assert _counts(backend, queue="hd") == {}
    assert ack(backend, take_one(backend, ["hd"]), Outcome.FAILED, message="no")
    now = minute_of(clock.now())
    assert now == old + HISTORY_MINUTES
    assert _counts(backend, queue="hd") == {("hd", now): (0, 1, 0, 0)}
    backend.trim(Retention())  # keeps the minutes of the last day
    assert _counts(backend, queue="hd") == {("hd", now): (0, 1, 0, 0)}
