"""``@app.job(breaker=Breaker(...))``: the option is checked once at decoration and stored
with each job as its flow control (the store's side: tests/conformance/test_breakers.py).

Expectations: pybreaker and resilience4j refuse a breaker that could never work
(``fail_max``/``failureRateThreshold`` and the wait must be positive) when it is built, not
at the first call; Sidekiq's and Hatchet's keys are strings or functions of the arguments.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Breaker, Conveyor
from conveyor.client.options import Aggregate
from conveyor.core.job import FlowControl
from conveyor.errors import InvalidKeyError


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"open_after": 0}, "open_after must be a whole number >= 1"),
    ({"open_after": 2.5}, "open_after must be a whole number >= 1"),
    ({"open_after": True}, "open_after must be a whole number >= 1"),
    ({"within": 0}, "within must be a finite number of seconds > 0"),
    ({"within": float("inf")}, "within must be a finite number of seconds > 0"),
    ({"cool_down": -1.0}, "cool_down must be a finite number of seconds > 0"),
    ({"cool_down": float("nan")}, "cool_down must be a finite number of seconds > 0"),
    ({"key": ""}, "key must not be empty"),
    ({"key": 42}, "key must be a string, a callable or None"),
])
def test_an_impossible_breaker_is_refused_in_one_line(kwargs: dict[str, Any],
                                                      words: str) -> None:
    """pybreaker/resilience4j: a breaker that could never trip or recover is an error when
    it is made."""
    with pytest.raises(ValueError, match=words) as raised:
        Breaker(**kwargs)
    assert "\n" not in str(raised.value)


def _flow(app: Conveyor, job_id: str) -> FlowControl:
    record = app.storage.get_job(job_id)
    assert record is not None and record.flow is not None
    return record.flow


def test_the_breaker_is_stored_with_the_job(mem: Conveyor) -> None:
    """A fixed key and its settings go with every job of the function."""
    stripe = Breaker("stripe", open_after=3, within=20, cool_down=7)

    @mem.job(breaker=stripe)
    def charge(order: int) -> None: ...

    ref = charge.enqueue(1)
    assert ref is not None
    flow = _flow(mem, ref.id)
    assert (flow.breaker_key, flow.breaker_open_after, flow.breaker_within,
            flow.breaker_cool_down) == ("stripe", 3, 20.0, 7.0)
    assert flow.to_wire() == {"breaker_key": "stripe", "breaker_open_after": 3,
                              "breaker_within": 20.0, "breaker_cool_down": 7.0}


def test_no_key_is_one_breaker_per_job_type_and_a_callable_picks_one(mem: Conveyor) -> None:
    """``key=None`` is the job's name; a callable is given the arguments, by name too (as
    ``fair_by``)."""

    @mem.job(name="t.plain", breaker=Breaker())
    def plain(n: int) -> None: ...

    @mem.job(name="t.by_host", breaker=Breaker(key=lambda host, **_: f"host:{host}"))
    def fetch(url: str, host: str) -> None: ...

    first, second = plain.enqueue(1), fetch.enqueue("/x", "example.org")
    assert first is not None and second is not None
    assert _flow(mem, first.id).breaker_key == "t.plain"
    assert _flow(mem, second.id).breaker_key == "host:example.org"


def test_a_job_without_a_breaker_stores_no_breaker_field(mem: Conveyor) -> None:
    """No cost for jobs that do not use it: their flow control is what it was."""

    @mem.job(name="t.none")
    def none() -> None: ...

    @mem.job(name="t.limited", concurrency=2)
    def limited() -> None: ...

    a, b = none.enqueue(), limited.enqueue()
    assert a is not None and b is not None
    record = mem.storage.get_job(a.id)
    assert record is not None and record.flow is None
    assert not any(k.startswith("breaker") for k in _flow(mem, b.id).to_wire())


def test_a_key_that_breaks_the_key_rule_is_refused_at_enqueue(mem: Conveyor) -> None:
    """The one key rule of every flow-control key (docs/flow-control.md, "Keys")."""

    @mem.job(name="t.bad", breaker=Breaker(key=lambda n: f"line\n{n}"))
    def bad(n: int) -> None: ...

    with pytest.raises(InvalidKeyError, match="breaker key") as raised:
        bad.enqueue(1)
    assert "\n" not in str(raised.value)


def test_a_breaker_does_not_apply_to_an_aggregated_job(mem: Conveyor) -> None:
    """An aggregated member runs with its aggregation, never alone (as concurrency)."""
    with pytest.raises(ValueError, match="breaker do not apply"):
        mem.job(aggregate=Aggregate(), breaker=Breaker())
    with pytest.raises(ValueError, match="breaker must be a Breaker"):
        mem.job(breaker="stripe")  # type: ignore[arg-type]
