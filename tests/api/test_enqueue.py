"""Enqueueing: JSON payloads, size limit, schedules, options, flow control, bulk."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState
from conveyor.client.registry import JobFunction
from conveyor.core.job import JobRecord
from conveyor.core.serializer import decode_payload
from conveyor.errors import PayloadError


@pytest.fixture
def add(app: Conveyor) -> JobFunction:
    @app.job(name="math.add", queue="math", retry=4, timeout=9)
    def add(a: int, b: int = 0) -> int:
        return a + b

    return add


def stored(app: Conveyor, job_id: str) -> JobRecord:
    record = app.get_job(job_id)
    assert record is not None
    return record


def test_enqueue_stores_the_job_with_its_options(app: Conveyor, add: JobFunction) -> None:
    ref = add.enqueue(1, b=2)
    assert ref is not None and ref.created
    record = stored(app, ref.id)
    assert (record.name, record.queue, record.state) == ("math.add", "math", JobState.PENDING)
    assert (record.args, record.kwargs) == ([1], {"b": 2})
    assert (record.max_retries, record.timeout) == (4, 9)
    assert [e.kind for e in record.events or []] == ["enqueued"]
    assert ref.status() == record


def test_a_value_json_cannot_hold_is_refused_with_its_path(
    app: Conveyor, add: JobFunction
) -> None:
    with pytest.raises(PayloadError, match=r"args\[1\]\['when'\]: datetime is not JSON"):
        add.enqueue(1, {"when": datetime.now(timezone.utc)})
    with pytest.raises(PayloadError, match=r"kwargs\['b'\]: set is not JSON"):
        add.enqueue(1, b={1})
    assert app.storage.count_jobs() == 0


def test_a_payload_over_the_limit_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    app = Conveyor(f"sqlite:///{tmp_path}/t.db", clock=clock, max_payload=1000)

    @app.job
    def store(blob: str) -> None: ...

    assert store.enqueue("x" * 900) is not None
    with pytest.raises(PayloadError, match="over the limit of 1000 bytes"):
        store.enqueue("x" * 1000)
    assert app.storage.count_jobs() == 1
    app.close()


def test_enqueue_in_seconds_or_timedelta_schedules(
    app: Conveyor, add: JobFunction, clock: FakeClock
) -> None:
    now = clock.now()
    first = add.enqueue_in(60, 1)
    second = add.enqueue_in(timedelta(hours=1), 2)
    assert first is not None and second is not None
    assert (stored(app, first.id).state, stored(app, first.id).run_at) == (
        JobState.SCHEDULED, now + 60)
    assert stored(app, second.id).run_at == now + 3600
    clock.advance(61)
    assert app.storage.promote_due() == 1
    assert stored(app, first.id).state is JobState.PENDING


def test_enqueue_at_takes_an_aware_datetime(
    app: Conveyor, add: JobFunction, clock: FakeClock
) -> None:
    when = datetime.fromtimestamp(clock.now() + 300, tz=timezone(timedelta(hours=2)))
    ref = add.enqueue_at(when, 1)
    assert ref is not None
    assert stored(app, ref.id).run_at == pytest.approx(clock.now() + 300)
    with pytest.raises(ValueError, match="timezone-aware"):
        add.enqueue_at(datetime(2030, 1, 1), 1)


def test_enqueue_by_name_overrides_the_registered_options(
    app: Conveyor, add: JobFunction
) -> None:
    ref = app.enqueue("math.add", [1, 2], queue="urgent", meta={"request": "r1"})
    assert ref is not None
    record = stored(app, ref.id)
    assert (record.queue, record.max_retries) == ("urgent", 4)
    assert decode_payload(record.payload) == ([1, 2], {}, {"request": "r1"})
    other = app.enqueue("elsewhere.job", kwargs={"x": 1}, retry=False)
    assert other is not None
    assert (stored(app, other.id).queue, stored(app, other.id).max_retries) == ("default", 0)


def test_options_copy_enqueues_with_its_options(app: Conveyor, add: JobFunction) -> None:
    ref = add.options(queue="low", retry=False).enqueue(1)
    assert ref is not None
    assert (stored(app, ref.id).queue, stored(app, ref.id).max_retries) == ("low", 0)


def test_expires_in_sets_a_deadline_from_when_the_job_is_due(
    app: Conveyor, clock: FakeClock
) -> None:
    @app.job(expires_in=30)
    def ping() -> None: ...

    now_ref, later_ref = ping.enqueue(), ping.enqueue_in(100)
    assert now_ref is not None and later_ref is not None
    assert stored(app, now_ref.id).deadline == clock.now() + 30
    assert stored(app, later_ref.id).deadline == clock.now() + 130


def test_flow_keys_are_computed_from_the_arguments(app: Conveyor) -> None:
    @app.job(concurrency_key=lambda seller_id, **_: f"seller:{seller_id}", concurrency=2,
             rate_limit=10, rate_period=1.0)
    def sync_seller(seller_id: int, full: bool = False) -> None: ...

    ref = sync_seller.enqueue(7, full=True)
    assert ref is not None
    flow = stored(app, ref.id).flow
    assert flow is not None
    assert (flow.concurrency_key, flow.concurrency_limit) == ("seller:7", 2)
    assert (flow.rate_key, flow.rate_limit, flow.rate_period) == (sync_seller.name, 10, 1.0)


def test_unique_for_without_a_key_locks_on_name_and_arguments(app: Conveyor) -> None:
    @app.job(unique_for=60)
    def refresh(item: int) -> None: ...

    first, again, other = refresh.enqueue(1), refresh.enqueue(1), refresh.enqueue(2)
    assert first is not None and again is not None and other is not None
    assert first.created and other.created
    assert not again.created and again.id == first.id
    assert app.storage.count_jobs() == 2


def test_enqueue_many_accepts_args_kwargs_and_pairs(app: Conveyor, add: JobFunction) -> None:
    refs = add.enqueue_many([[1], (2, 3), {"a": 4}, ([5], {"b": 6})])
    records = [stored(app, ref.id) for ref in refs]
    assert [(r.args, r.kwargs) for r in records] == [
        ([1], {}), ([2, 3], {}), ([], {"a": 4}), ([5], {"b": 6})]
    with pytest.raises(TypeError, match="item 1 is a str"):
        add.enqueue_many([[10], "oops"])
    with pytest.raises(PayloadError, match=r"args\[0\]: object is not JSON"):
        add.enqueue_many([[11], [object()], [12]])
    stored_args = [r.args for r in app.storage.list_jobs(queue="math", limit=100)]
    assert sorted(stored_args) == [[], [1], [2, 3], [5], [10], [11]]  # items before a bad one


def test_enqueue_many_of_25000_jobs(app: Conveyor, add: JobFunction) -> None:
    """A generator of jobs, sent in blocks of 2,000 (13 sends): every job counted and stored.
    The store's 100,000 in one call is tests/conformance/test_lifecycle.py's, on each store."""
    count = add.enqueue_many(([i] for i in range(25_000)), return_refs=False)
    assert count == 25_000
    assert app.storage.count_jobs(queue="math", state=JobState.PENDING) == 25_000
    refs = add.enqueue_many([i] for i in range(2_500))
    assert len({ref.id for ref in refs}) == 2_500
    assert stored(app, refs[-1].id).args == [2_499]


def test_url_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_URL", "memory://env")
    assert Conveyor().url == "memory://env"
    monkeypatch.delenv("CONVEYOR_URL")
    assert Conveyor().url == "sqlite:///conveyor.db"


def test_key_callables_pick_arguments_by_the_jobs_parameter_names(app: Conveyor) -> None:
    seen: list[tuple[Any, ...]] = []

    def by_name(seller_id: int, **_: Any) -> str:
        seen.append((seller_id, _))
        return f"seller:{seller_id}"

    @app.job(concurrency=2, concurrency_key=by_name, order_key=lambda a, b: f"{a}-{b}")
    def register(seller_id: int, product_id: int) -> None: ...

    register.enqueue(7, 42)
    register.enqueue(8, product_id=43)
    register.options(queue="other").enqueue(seller_id=9, product_id=44)
    flows = [j.flow for j in app.storage.list_jobs(limit=10)]
    assert all(f is not None for f in flows)
    assert seen == [(7, {"product_id": 42}), (8, {"product_id": 43}),
                    (9, {"product_id": 44})]
    assert sorted(str(f.order_key) for f in flows if f) == ["7-42", "8-43", "9-44"]
    assert {f.concurrency_key for f in flows if f} == {"seller:7", "seller:8", "seller:9"}


def test_a_key_callable_that_fits_neither_way_raises_at_enqueue(app: Conveyor) -> None:
    @app.job(concurrency=1, concurrency_key=lambda x, y, z: "k")
    def two(a: int, b: int) -> None: ...

    with pytest.raises(TypeError):
        two.enqueue(1, 2)
