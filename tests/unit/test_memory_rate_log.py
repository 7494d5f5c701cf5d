"""The memory backend's rate logs stay bounded: a key's start times are forgotten once its
newest start has left the window (as the Redis log is)."""

from __future__ import annotations

from conveyor.core.clock import FakeClock
from conveyor.core.job import FlowControl, JobSpec
from conveyor.storage.memory import MemoryStorage


def test_idle_rate_keys_are_forgotten() -> None:
    clock = FakeClock()
    store = MemoryStorage("memory://", clock)
    for key in ("a", "b"):
        flow = FlowControl(rate_key=key, rate_limit=2, rate_period=10.0)
        store.enqueue([JobSpec(id=f"{key}{i}", name="t", queue="q", payload="{}", flow=flow)
                       for i in range(3)])
    assert len(store.dequeue(["q"], "w", 10, 30)) == 4
    gate = store.state.flow  # the bookkeeping itself: what this test is about
    assert sorted(gate._starts) == ["a", "b"]
    clock.advance(10)
    assert len(store.dequeue(["q"], "w", 10, 30)) == 2  # the windows let a2 and b2 start
    clock.advance(11.5)  # both windows ended more than a second ago
    assert store.dequeue(["q"], "w", 10, 30) == []
    assert (gate._starts, gate._rate_ends, gate._idle) == ({}, {}, [])
