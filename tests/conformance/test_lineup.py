"""A queue's lineup, the same on every store (docs/scheduling.md, storage/lineup.py):
priority, then fair turns between keys, then arrival; cost against the room of a fetch and a
key's concurrency limit; every choice made in the same atomic step that leases."""

from __future__ import annotations

from conveyor.core.clock import FakeClock
from conveyor.core.job import FlowControl, JobState, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import (
    ack,
    boom,
    connections,
    put,
    run_in_threads,
    state_of,
    take,
    take_one,
)


def _p(priority: int, **more: object) -> FlowControl:
    return FlowControl(priority=priority, **more)  # type: ignore[arg-type]


def _fair(key: str, **more: object) -> FlowControl:
    return FlowControl(fair_key=key, **more)  # type: ignore[arg-type]


def _order(backend: Backend, count: int = 1, rounds: int = 100) -> list[str]:
    """The ids leased, ``count`` per call, until the queue is empty."""
    out: list[str] = []
    for _ in range(rounds):
        jobs = take(backend, count=count)
        if not jobs:
            break
        out += [j.id for j in jobs]
    return out


# -- priority -----------------------------------------------------------------------------

def test_higher_priority_first_then_arrival(backend: Backend) -> None:
    """pg-boss's "descending priority order" and Django's tasks API (-100..100, higher
    first): within a priority, arrival order; jobs without one are priority 0."""
    plain = [put(backend) for _ in range(2)]
    low = put(backend, flow=_p(-5))
    high = [put(backend, flow=_p(10)), put(backend, flow=_p(10))]
    top = put(backend, flow=_p(100))
    assert _order(backend) == [top, *high, *plain, low]


def test_priority_holds_within_one_fetch_of_many(backend: Backend) -> None:
    """The lease itself picks by priority: one fetch of three takes the three highest."""
    ids = {p: put(backend, flow=_p(p)) for p in (-1, 3, 0, 7, 5)}
    assert [j.id for j in take(backend, count=3)] == [ids[7], ids[5], ids[3]]


def test_workers_racing_take_the_highest_first(backend: Backend, clock: FakeClock) -> None:
    """Several workers on their own connections lease at once: each job once, and the jobs
    taken are the highest priorities whoever took them."""
    ids = {p: put(backend, flow=_p(p)) for p in range(-10, 10)}
    taken: list[str] = []
    with connections(backend, clock, 4) as stores:
        run_in_threads(lambda i: taken.extend(j.id for j in take(stores[i], count=2)), 4)
    assert sorted(taken) == sorted(ids[p] for p in range(2, 10))


def test_a_held_job_of_higher_priority_lets_lower_ones_start(backend: Backend) -> None:
    """procrastinate's rule: a higher-priority job a limit holds back does not stop the
    worker from taking an available lower one."""
    limited = FlowControl(concurrency_key="k", concurrency_limit=1, priority=9)
    first = put(backend, flow=limited)
    second = put(backend, flow=limited)
    low = put(backend, flow=_p(-3))
    assert [j.id for j in take(backend, count=3)] == [first, low]
    assert state_of(backend, second) is JobState.PENDING


def test_a_retried_job_keeps_its_priority(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend, flow=_p(4))
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom(), retry_in=5)
    plain = put(backend)
    clock.advance(6)
    backend.promote_due()
    assert _order(backend) == [job_id, plain]


def test_aging_raises_a_waiting_jobs_priority(backend: Backend, clock: FakeClock) -> None:
    """A low job with aging gains a point per ``aging`` seconds waiting (at the poller's
    promotion step), so a later stream of higher jobs does not starve it."""
    old = put(backend, flow=_p(0, aging=10.0))
    clock.advance(25)
    backend.promote_due()  # two steps due (at 10 and 20): priority 2
    newer = put(backend, flow=_p(2))  # equal priority: the older goes first
    assert _order(backend) == [old, newer]
    stays = put(backend, flow=_p(0, aging=10.0))
    higher = put(backend, flow=_p(1))
    clock.advance(5)
    backend.promote_due()  # not yet
    assert _order(backend) == [higher, stays]


# -- fair turns ---------------------------------------------------------------------------

def _keys(backend: Backend, ids: dict[str, str], count: int = 1) -> list[str]:
    return [ids[i] for i in _order(backend, count)]


def test_fair_keys_take_turns(backend: Backend) -> None:
    """Hatchet's GROUP_ROUND_ROBIN, issue 54's case: a key with many jobs waiting and keys
    that came after it are served alternately, not one after the other."""
    ids: dict[str, str] = {}
    for key, n in (("a", 8), ("b", 3), ("c", 2)):
        for _ in range(n):
            ids[put(backend, flow=_fair(key))] = key
    assert _keys(backend, ids) == ["a", "b", "c", "a", "b", "c", "a", "b", "a", "a", "a",
                                   "a", "a"]


def test_turns_hold_within_one_fetch_and_across_fetches(backend: Backend) -> None:
    ids: dict[str, str] = {}
    for key in ("x", "y"):
        for _ in range(4):
            ids[put(backend, flow=_fair(key))] = key
    first = [ids[j.id] for j in take(backend, count=3)]
    second = [ids[j.id] for j in take(backend, count=3, worker="w2")]
    assert first + second == ["x", "y", "x", "y", "x", "y"]


def test_jobs_without_a_key_take_one_turn_together(backend: Backend) -> None:
    ids: dict[str, str] = {}
    for _ in range(3):
        ids[put(backend)] = "-"
    for _ in range(3):
        ids[put(backend, flow=_fair("k"))] = "k"
    assert _keys(backend, ids) == ["-", "k", "-", "k", "-", "k"]


def test_arrival_order_within_a_key(backend: Backend) -> None:
    a = [put(backend, flow=_fair("a")) for _ in range(3)]
    b = [put(backend, flow=_fair("b")) for _ in range(3)]
    got = _order(backend)
    assert [i for i in got if i in a] == a and [i for i in got if i in b] == b


def test_a_held_key_passes_its_turn(backend: Backend) -> None:
    """A key whose jobs a concurrency limit holds back does not stall the others' turns."""
    held = FlowControl(fair_key="a", concurrency_key="a", concurrency_limit=1)
    first = put(backend, flow=held)
    blocked = [put(backend, flow=held) for _ in range(3)]
    others = [put(backend, flow=_fair("b")) for _ in range(3)]
    assert take_one(backend).id == first
    assert [j.id for j in take(backend, count=10)] == others
    assert all(state_of(backend, i) is JobState.PENDING for i in blocked)


def test_priority_comes_before_fair_turns(backend: Backend) -> None:
    """Temporal's order: priority first, fair turns within a priority."""
    low = [put(backend, flow=_fair("a")) for _ in range(2)]
    urgent = put(backend, flow=_fair("b", priority=50))
    rest = put(backend, flow=_fair("b"))
    got = _order(backend)
    assert got[0] == urgent and sorted(got[1:]) == sorted([*low, rest])


def test_ordered_keys_keep_their_order_under_fair_turns(backend: Backend) -> None:
    flow = FlowControl(fair_key="a", order_key="o")
    ordered = [put(backend, flow=flow) for _ in range(3)]
    other = put(backend, flow=_fair("b"))
    first = take(backend, count=5)
    assert [j.id for j in first] == [ordered[0], other]
    assert ack(backend, first[0])
    assert take_one(backend).id == ordered[1]


def test_a_key_arriving_later_gets_its_turn_at_once(backend: Backend) -> None:
    """A key that comes while another has a backlog is served at the next turn, not after
    the backlog."""
    big = [put(backend, flow=_fair("big")) for _ in range(10)]
    assert [j.id for j in take(backend, count=2)] == big[:2]
    late = put(backend, flow=_fair("late"))
    assert [j.id for j in take(backend, count=2)] == [late, big[2]]


# -- cost ---------------------------------------------------------------------------------

def test_cost_counts_against_the_room_of_a_fetch(backend: Backend) -> None:
    heavy = put(backend, flow=FlowControl(cost=4))
    light = [put(backend) for _ in range(3)]
    jobs = take(backend, count=5)
    assert [(j.id, j.cost) for j in jobs] == [(heavy, 4), (light[0], 1)]


def test_a_job_that_does_not_fit_is_not_jumped(backend: Backend) -> None:
    """Nothing behind a job waiting for room starts before it, so cheap jobs cannot starve
    a costly one; with room it starts."""
    heavy = put(backend, flow=FlowControl(cost=3))
    light = put(backend)
    assert take(backend, count=2) == []
    assert [j.id for j in take(backend, count=3)] == [heavy]
    assert take_one(backend).id == light


def test_a_job_costlier_than_the_worker_is_left_for_a_larger_one(backend: Backend) -> None:
    heavy = put(backend, flow=FlowControl(cost=8))
    light = put(backend)
    assert [j.id for j in backend.dequeue(["default"], "small", 4, 30.0, 4)] == [light]
    assert [j.id for j in backend.dequeue(["default"], "big", 8, 30.0, 8)] == [heavy]


def test_cost_counts_against_a_concurrency_limit(backend: Backend) -> None:
    flow = FlowControl(concurrency_key="gpu", concurrency_limit=4)
    three = put(backend, flow=FlowControl(concurrency_key="gpu", concurrency_limit=4, cost=3))
    two = put(backend, flow=FlowControl(concurrency_key="gpu", concurrency_limit=4, cost=2))
    one = put(backend, flow=flow)
    jobs = take(backend, count=10)
    assert [j.id for j in jobs] == [three, one]  # 3 + 2 would be 5 of 4
    assert ack(backend, jobs[0])
    assert [j.id for j in take(backend, count=10)] == [two]
