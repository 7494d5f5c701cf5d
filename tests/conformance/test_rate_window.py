"""The rate limit's window, the same on every backend: a sliding log of start times.

The rule (docs/flow-control.md): a job under ``rate_key`` K with ``rate_limit`` N and
``rate_period`` P may start at time t only while fewer than N jobs of K started in the
half-open span (t - P, t]. So a start at s stops counting at exactly s + P, and no span of P
seconds, wherever it begins, ever holds more than N starts. A fixed window (count per period
from the window's first start, reset at its end) breaks both: it admits N more the moment
the window ends, so up to 2N starts can fall in one span of P seconds.

Times are whole or binary fractions of a second, so ``now - P`` is exact in floating point and
the boundary cases are decided by the rule, not by rounding.
"""

from __future__ import annotations

import random

from conveyor.core.clock import FakeClock
from conveyor.core.job import FlowControl, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import ack, boom, put, state_of, take

T0 = FakeClock().now()
LIMIT, PERIOD = 3, 10.0


def _rated(key: str = "api", limit: int = LIMIT, period: float = PERIOD) -> FlowControl:
    return FlowControl(rate_key=key, rate_limit=limit, rate_period=period)


def _starts_at(backend: Backend, clock: FakeClock, at: float, count: int = 10) -> int:
    """Move the clock to T0 + ``at``, start (and finish) what the limit lets through."""
    clock.set(T0 + at)
    jobs = take(backend, count=count)
    for job in jobs:
        assert ack(backend, job)
    return len(jobs)


def _most_in_any_span(starts: list[float], period: float) -> int:
    """The largest number of starts in one span (t - period, t]; the busiest span ends at a
    start, so checking the spans that end at each start is enough."""
    return max((sum(1 for s in starts if end - period < s <= end) for end in starts), default=0)


def test_a_start_is_released_exactly_when_the_oldest_leaves_the_window(
    backend: Backend, clock: FakeClock
) -> None:
    waiting = [put(backend, flow=_rated()) for _ in range(6)]
    assert [_starts_at(backend, clock, at, count=1) for at in (0, 1, 2)] == [1, 1, 1]
    # Held: three starts in (t - 10, t] for every t up to just before 10.
    assert _starts_at(backend, clock, 3) == 0
    assert _starts_at(backend, clock, 9.75) == 0
    record = backend.get_job(waiting[3])
    assert record is not None and record.state is JobState.PENDING
    assert (record.attempt, record.errors) == (0, 0)  # waiting burns no attempt
    # At t = 10 the start at 0 leaves (0, 10]: exactly one slot, not a fresh window of three.
    assert _starts_at(backend, clock, 10) == 1
    assert _starts_at(backend, clock, 10.5) == 0  # the starts at 1, 2 and 10 still count
    assert _starts_at(backend, clock, 11) == 1  # the start at 1 left
    assert _starts_at(backend, clock, 12) == 1  # the start at 2 left
    assert _starts_at(backend, clock, 12.5) == 0
    assert backend.count_jobs(state=JobState.PENDING) == 0


def test_no_span_of_one_period_holds_more_than_the_limit_across_a_window_boundary(
    backend: Backend, clock: FakeClock
) -> None:
    for _ in range(12):
        put(backend, flow=_rated())
    starts: list[float] = []
    # (time, how many a worker asks for) -> how many the sliding window lets start.
    polls = [(0, 1, 1), (9.5, 10, 2), (10, 10, 1), (10.5, 10, 0), (19.5, 10, 2), (20, 10, 1)]
    for at, want, expected in polls:
        got = _starts_at(backend, clock, at, count=want)
        starts += [at] * got
        assert (at, got) == (at, expected)
    # A fixed window opened at 0 would have let three start at 10 (five in (0.5, 10.5]).
    assert _most_in_any_span(starts, PERIOD) == LIMIT


def test_the_window_holds_within_one_dequeue_call_and_per_key(
    backend: Backend, clock: FakeClock
) -> None:
    a = [put(backend, flow=_rated("a")) for _ in range(5)]
    b = [put(backend, flow=_rated("b", limit=1)) for _ in range(2)]
    assert sorted(j.id for j in take(backend, count=10)) == sorted([*a[:3], b[0]])
    clock.advance(PERIOD)
    assert sorted(j.id for j in take(backend, count=10)) == sorted([*a[3:], b[1]])


def test_a_retry_is_a_start(backend: Backend, clock: FakeClock) -> None:
    first = put(backend, flow=_rated(limit=2))
    second = put(backend, flow=_rated(limit=2))
    job = take(backend)[0]
    assert job.id == first
    assert ack(backend, job, Outcome.RETRY, error=boom(), retry_in=1)
    clock.advance(1)
    backend.promote_due()
    # The retry of `first` and `second` compete for the one slot left (2 starts per 10 s).
    assert len(take(backend, count=10)) == 1
    assert _starts_at(backend, clock, 9.75) == 0
    assert _starts_at(backend, clock, 10) == 1  # the first start left the window
    assert {state_of(backend, i) for i in (first, second)} == {JobState.SUCCEEDED,
                                                               JobState.ACTIVE}


def test_random_polls_match_a_sliding_log(backend: Backend, clock: FakeClock) -> None:
    """Many polls at random times and sizes start exactly what a reference sliding log of
    start times admits, no more and no fewer."""
    rng = random.Random(15)
    for _ in range(60):
        put(backend, flow=_rated(limit=4, period=5.0))
    at, pending = 0.0, 60
    log: list[float] = []
    for _ in range(40):
        at += rng.choice((0.25, 0.5, 1.0, 1.25, 2.5, 5.0))
        want = rng.randint(1, 5)
        in_window = sum(1 for s in log if s > at - 5.0)
        expected = min(want, pending, 4 - in_window)
        got = _starts_at(backend, clock, at, count=want)
        assert (at, got) == (at, expected)
        log += [at] * got
        pending -= got
    assert _most_in_any_span(log, 5.0) == 4
