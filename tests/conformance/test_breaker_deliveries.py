"""Breakers on the broker path: a delivery of a job whose breaker is open is parked in the
store (as a paused queue or a full limit parks it, docs/internals/outbox.md), the relay does
not publish it again while the breaker holds, and after the cool-down one delivery starts as
the probe — the same gate ``dequeue`` applies (tests/conformance/test_breakers.py).

Expectations: Sidekiq Enterprise's limiter reschedules a job over its limit instead of
failing it; pybreaker/resilience4j let one trial call through once the wait is over.
"""

from __future__ import annotations

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import FlowControl, JobState, Outcome
from conveyor.storage import Backend
from conveyor.storage.outbox import Arrival, StartKind
from tests.conformance import test_outbox
from tests.conformance.helpers import ack, boom, events_of, put, state_of
from tests.conformance.test_breakers import _NOT_YET
from tests.conformance.test_outbox import box, due, started

#: The outbox stores (conftest's ``backend``, narrowed as test_outbox.py narrows it).
backend = test_outbox.backend


@pytest.fixture(autouse=True)
def _built(request: pytest.FixtureRequest) -> None:
    name = request.node.callspec.params.get("backend")
    if name in _NOT_YET:
        pytest.skip(f"breakers on {name}: not yet built (issue 56)")


def test_a_held_delivery_is_parked_and_one_probe_starts_after_the_cool_down(
        backend: Backend, clock: FakeClock) -> None:
    flow = FlowControl(breaker_key="stripe", breaker_open_after=1, breaker_within=60.0,
                       breaker_cool_down=30.0)
    first = put(backend, flow=flow)
    assert due(backend) == [first]
    assert ack(backend, started(backend, first), Outcome.RETRY, error=boom("503"),
               retry_in=600.0)
    a, b = put(backend, flow=flow), put(backend, flow=flow)
    assert due(backend) == [a, b]
    arrivals = [Arrival(a, False, None), Arrival(b, False, None)]
    replies = box(backend).start("default", arrivals, "w1", 30.0)
    assert [r.kind for r in replies] == [StartKind.PARKED, StartKind.PARKED]
    assert due(backend) == []  # parked while the breaker holds: not published again
    clock.advance(30.0)
    assert due(backend) == [a, b]
    replies = box(backend).start("default", arrivals, "w1", 30.0)
    assert [r.kind for r in replies] == [StartKind.STARTED, StartKind.PARKED]
    assert (state_of(backend, a), state_of(backend, b)) == (JobState.ACTIVE, JobState.PENDING)
    assert [e.message for e in events_of(backend, a) if e.kind == "breaker"] == [
        "probe of breaker 'stripe'"]
    (listed,) = backend.breakers()
    assert (listed.state, listed.probe_id) == ("half_open", a)
