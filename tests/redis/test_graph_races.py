"""Workflow settling on Redis across processes: a settler whose read of a parent went stale
while another settled that parent must not undo the other's step (found by scenario 32, a
kill -9 storm over a fan-in workflow, under CPU load: the fan-in node waited forever with
every parent succeeded)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, JobState, Outcome
from conveyor.storage.graph import JobView
from conveyor.storage.redis.keys import BatchKeys
from conveyor.storage.redis.storage import RedisStorage, open_redis
from tests.conformance.test_workflows import Graph
from tests.redis.conftest import prefixed

pytestmark = pytest.mark.redis


@pytest.fixture
def two(redis_server: Any) -> Iterator[tuple[RedisStorage, RedisStorage]]:
    """Two processes' storages on the same keys."""
    url = prefixed(redis_server.url)
    a, b = open_redis(url), open_redis(url)
    yield a, b
    a.close()
    b.close()


def test_a_stale_read_does_not_unsettle_a_parent_another_process_settled(
        two: tuple[RedisStorage, RedisStorage]) -> None:
    a, b = two
    g = Graph(a, {"p1": [], "p2": [], "j": ["p1", "p2"]})
    p1, p2 = g.ids["p1"], g.ids["p2"]
    leased = {j.id: j for j in a.dequeue(["wf"], "w-a", 10, 30)}
    # A worker's ack of p1, first half: its workflow's counters hear "succeeded" (p1 marked);
    # the record still says active.
    a._graph.sync_batches([(g.id, p1, "succeeded:wf")], settle=False)

    # Process b starts settling: it reads p1 as active. Before its graph step runs, the ack is
    # applied and settled by a, to the end (p1 settled, its mark removed).
    real_views = b._graph.views

    def stale_then_settled(bk: BatchKeys, ids: Any, members: Any = None) -> dict[str, JobView]:
        views = real_views(bk, ids, members)
        if p1 in views and views[p1].state == "active":
            assert a.ack([Ack(p1, leased[p1].token, Outcome.SUCCEEDED)]) == [True]
        return views

    b._graph.views = stale_then_settled  # type: ignore[method-assign]
    b._graph.settle_graphs([g.id])
    b._graph.views = real_views  # type: ignore[method-assign]

    assert a.ack([Ack(p2, leased[p2].token, Outcome.SUCCEEDED)]) == [True]
    assert a._graph.settle_marked() >= 0  # the sweep too finds nothing left to do
    assert g.state("j") is JobState.PENDING  # released: both parents succeeded


def test_the_sweep_heals_a_workflow_whose_parent_outcome_was_never_counted(
        faked: RedisStorage, clock: FakeClock) -> None:
    """Whatever loses a parent's mark (a race not reproduced yet left scenario 32's fan-in
    waiting, 1 run in ~8 under load on Cluster), the sweep finds the workflow stuck — nodes
    waiting, nothing else left to run, no mark — marks the parents that ended unsettled, and
    settles them."""
    g = Graph(faked, {"p1": [], "p2": [], "j": ["p1", "p2"]})
    p1, p2 = g.ids["p1"], g.ids["p2"]
    leased = {j.id: j for j in faked.dequeue(["wf"], "w", 10, 30)}
    real_settle = faked._graph.settle_graphs
    faked._graph.settle_graphs = lambda ids: None  # type: ignore[method-assign,assignment]
    assert faked.ack([Ack(p1, leased[p1].token, Outcome.SUCCEEDED)]) == [True]
    faked._graph.settle_graphs = real_settle  # type: ignore[method-assign]
    bk = faked.keys.batch(g.id)
    assert faked.link.call("HDEL", bk.marks, p1) == 1  # p1's outcome will never be settled
    assert faked.ack([Ack(p2, leased[p2].token, Outcome.SUCCEEDED)]) == [True]
    assert g.state("j") is JobState.WAITING  # stuck: both parents succeeded
    clock.advance(10)  # the sweep looks again at a workflow without marks after a while
    faked._graph.settle_marked()
    assert g.state("j") is JobState.PENDING
    assert faked.link.call("HLEN", bk.marks) == 0


def test_a_stale_read_is_not_acted_on_while_the_settle_it_races_still_holds_the_mark(
        two: tuple[RedisStorage, RedisStorage]) -> None:
    """The same stale read, later: the acknowledging process has settled the parent but not
    yet removed its mark when the slow settler's graph step runs (seen in a storm's trace)."""
    a, b = two
    g = Graph(a, {"p1": [], "p2": [], "j": ["p1", "p2"]})
    p1, p2 = g.ids["p1"], g.ids["p2"]
    leased = {j.id: j for j in a.dequeue(["wf"], "w-a", 10, 30)}
    a._graph.sync_batches([(g.id, p1, "succeeded:wf")], settle=False)  # p1 marked "1", still active
    bk = a.keys.batch(g.id)
    real_views = b._graph.views

    def stale_then_settled(bk_: BatchKeys, ids: Any, members: Any = None) -> dict[str, JobView]:
        views = real_views(bk_, ids, members)
        if p1 in views and views[p1].state == "active":
            real_settle = a._graph.settle_graphs
            a._graph.settle_graphs = lambda ids: None  # type: ignore[method-assign,assignment]
            assert a.ack([Ack(p1, leased[p1].token, Outcome.SUCCEEDED)]) == [True]
            a._graph.settle_graphs = real_settle  # type: ignore[method-assign]
            a.scripts.run("graph", bk, ["settle", p1, "succeeded", "1"])  # a's graph step
        return views

    b._graph.views = stale_then_settled  # type: ignore[method-assign]
    b._graph.settle_graphs([g.id])
    b._graph.views = real_views  # type: ignore[method-assign]
    assert a.scripts.run("graph", bk, ["done", p1, "1"]) == 1  # a removes the mark after

    assert a.ack([Ack(p2, leased[p2].token, Outcome.SUCCEEDED)]) == [True]
    assert g.state("j") is JobState.PENDING
