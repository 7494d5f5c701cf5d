"""Aggregation through the public API on every kind of store: ``@app.job(aggregate=...)``
members run once per group through ``@app.aggregate``, each member ends by its own outcome,
and a raising aggregator retries every member by its own rules. The apps run on a
``FakeClock``: a group is due when the test moves the clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Aggregate, Conveyor, Fail, FakeClock, JobState, Member, Retry
from conveyor.errors import NoAggregatorError
from conveyor.testing import drain
from tests.conformance.backends import backend_url

RUNS: list[list[tuple[int, str]]] = []
GRACE = 5.0


def _app(url: str, clock: FakeClock) -> Conveyor:
    app = Conveyor(url, clock=clock)

    @app.job(name="t.notify", retry=2, retry_in=lambda attempt, exc: 10.0,
             aggregate=Aggregate(lambda user_id, **_: f"user:{user_id}", grace=GRACE,
                                 max_size=50))
    def notify(user_id: int, text: str) -> None:
        raise AssertionError("a member never runs alone")

    @app.aggregate(notify)
    def send_digest(members: list[Member]) -> str:
        RUNS.append([(m.kwargs.get("user_id", m.args[0]), m.args[1]) for m in members])
        for m in members:
            text = m.args[1]
            if text == "unsubscribed":
                m.fail("user unsubscribed")
            elif text == "flaky":
                m.retry("mail server busy", in_seconds=3)
            elif text == "broken":
                m.error(ValueError("bad template"))
            elif text == "explode":
                raise RuntimeError("digest service down")
            else:
                m.log(f"sent {text}")
        return "digest-1"

    return app


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request.param, tmp_path, request.getfixturevalue)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(url: str, clock: FakeClock) -> Iterator[Conveyor]:
    RUNS.clear()
    app = _app(url, clock)
    yield app
    app.close()


def _record(app: Conveyor, job_id: str) -> Any:
    rec = app.get_job(job_id)
    assert rec is not None
    return rec


def test_one_call_per_group_and_an_outcome_per_member(app: Conveyor, clock: FakeClock) -> None:
    notify = app.registry.get("t.notify")
    assert notify is not None
    refs = [notify.enqueue(1, t) for t in ("hello", "unsubscribed", "flaky", "broken")]
    other = notify.enqueue(2, "hi")
    assert all(r is not None for r in [*refs, other])
    ids = [r.id for r in refs if r is not None]
    assert _record(app, ids[0]).state is JobState.AGGREGATING
    assert drain(app) == 0  # within the grace: nothing runs
    clock.advance(GRACE)
    assert drain(app) == 2  # one run per group
    assert sorted(RUNS) == sorted([[(1, "hello"), (1, "unsubscribed"), (1, "flaky"),
                                    (1, "broken")], [(2, "hi")]])
    hello, unsub, flaky, broken = (_record(app, i) for i in ids)
    assert (hello.state, hello.result) == (JobState.SUCCEEDED, "\"digest-1\"")  # JSON
    assert "sent hello" in [e.message for e in hello.events]
    assert (unsub.state, unsub.message) == (JobState.FAILED, "user unsubscribed")
    assert (flaky.state, flaky.message) == (JobState.RETRYING, "mail server busy")
    assert broken.state is JobState.RETRYING and "bad template" in (broken.message or "")
    assert flaky.run_at == pytest.approx(clock.now() + 3)
    assert broken.run_at == pytest.approx(clock.now() + 10)  # the job's own retry_in
    RUNS.clear()
    clock.advance(10)
    assert drain(app) == 0  # both are due: back into their group, for its grace
    assert _record(app, ids[2]).state is JobState.AGGREGATING
    clock.advance(GRACE)
    assert drain(app) == 1
    assert sorted(RUNS[0]) == [(1, "broken"), (1, "flaky")]


def test_a_raising_aggregator_retries_every_member_by_its_rules(
        app: Conveyor, clock: FakeClock) -> None:
    notify = app.registry.get("t.notify")
    assert notify is not None
    refs = [notify.enqueue(3, t) for t in ("a", "explode")]
    ids = [r.id for r in refs if r is not None]
    for attempt in range(3):  # retry=2: the third error is the last
        if attempt:
            clock.advance(10)
            assert drain(app) == 0  # the retries are due: back into their group
        clock.advance(GRACE)
        assert drain(app) == 1
        expected = JobState.DEAD if attempt == 2 else JobState.RETRYING
        assert [_record(app, i).state for i in ids] == [expected] * 2
    rec = _record(app, ids[1])
    assert rec.errors == 3 and "digest service down" in (rec.message or "")


def test_an_aggregated_job_without_an_aggregator_is_refused(url: str, clock: FakeClock) -> None:
    app = Conveyor(url, clock=clock)

    @app.job(name="t.lonely", aggregate=Aggregate("all"))
    def lonely() -> None: ...

    with pytest.raises(NoAggregatorError, match=r"@app.aggregate\(lonely\)"):
        lonely.enqueue()
    with pytest.raises(NoAggregatorError):
        lonely.enqueue_many([() for _ in range(3)])
    assert app.storage.count_jobs() == 0
    app.close()


def test_a_group_fails_on_fail_raised_by_the_aggregator(url: str, clock: FakeClock) -> None:
    app = Conveyor(url, clock=clock)

    @app.job(name="t.row", aggregate=Aggregate(grace=1, max_size=3))
    def row(n: int) -> None: ...

    @app.aggregate("t.row")
    def write_rows(members: list[Member]) -> None:
        raise Fail("the table is read-only")

    refs = row.enqueue_many([(n,) for n in range(7)], return_refs=True)
    assert drain(app) == 2  # two full groups ran at once; the 7th waits for its grace
    states = [_record(app, r.id).state for r in refs]
    assert states == [JobState.FAILED] * 6 + [JobState.AGGREGATING]
    clock.advance(1)
    assert drain(app) == 1
    assert _record(app, refs[6].id).message == "the table is read-only"
    app.close()


def test_a_retry_in_no_time_that_is_a_number_is_refused_where_it_is_asked(
        url: str, clock: FakeClock) -> None:
    """Issue 49: ``member.retry(in_seconds=nan)`` became a 0 s delay, the member retried at
    once again and again until its retries were gone. A delay that is not a finite number
    >= 0 is a ``ValueError`` in one line at the call (the aggregator raised: every member is
    an error, retried by the default backoff); ``raise Retry(...)`` the same."""
    app = Conveyor(url, clock=clock)
    asked: list[str] = []

    @app.job(name="t.ping", retry=5, aggregate=Aggregate(grace=1))
    def ping(n: int) -> None: ...

    @app.aggregate("t.ping")
    def pong(members: list[Member]) -> None:
        for bad in (float("nan"), float("inf"), -1.0, "5"):
            try:
                members[0].retry("again", in_seconds=bad)  # type: ignore[arg-type]
            except ValueError as exc:
                asked.append(str(exc))
        members[0].retry("again", in_seconds=float("nan"))

    ref = ping.enqueue(1)
    assert ref is not None
    clock.advance(1)
    assert drain(app) == 1
    assert len(asked) == 4 and all("in_seconds" in a and "\n" not in a for a in asked)
    rec = _record(app, ref.id)
    assert (rec.state, rec.errors) == (JobState.RETRYING, 1)
    assert rec.run_at >= clock.now() + 15  # the default backoff, not an immediate retry
    with pytest.raises(ValueError, match="in_seconds"):
        Retry("x", in_seconds=float("nan"))
    app.close()


def test_a_member_takes_one_outcome(url: str, clock: FakeClock) -> None:
    """A second mark was kept silently over the first (docs/aggregation.md: one outcome per
    member): now it raises, one line, and the first mark stands."""
    app = Conveyor(url, clock=clock)
    said: list[str] = []

    @app.job(name="t.mark", retry=0, aggregate=Aggregate(grace=1))
    def mark(n: int) -> None: ...

    @app.aggregate("t.mark")
    def marks(members: list[Member]) -> str:
        members[0].done("first")
        try:
            members[0].fail("second")
        except RuntimeError as exc:
            said.append(str(exc))
        return "run"

    ref = mark.enqueue(1)
    assert ref is not None
    clock.advance(1)
    assert drain(app) == 1
    assert len(said) == 1 and "already marked done" in said[0] and "\n" not in said[0]
    rec = _record(app, ref.id)
    assert (rec.state, rec.result) == (JobState.SUCCEEDED, '"first"')
    app.close()
