"""Typed arguments and results end to end (docs/job-data.md, "Typed arguments"): validated at
enqueue on every way in (enqueue, enqueue_many, by name, canvas signatures, workflow nodes,
periodic schedules), stored as JSON, handed to the job typed; a typed return read back typed
by ``JobRef.result``.

Expectations from Celery 5.5's pydantic tasks (``@app.task(pydantic=True)``: the task gets
model instances, its model return value is dumped to JSON, a bad argument raises before it
runs), Hatchet and taskiq (input models validated), Oban Pro (structured args refused at
insert with the field named).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor import Conveyor, JobState, chain
from conveyor.testing import drain
from tests.api.typed_models import Line, Order, Point, Route, Tag

seen: list[Any] = []


def register(app: Conveyor) -> dict[str, Any]:
    @app.job(name="typed.total")
    def total(order: Order, tag: Tag | None = None) -> Point:
        seen.append((order, tag))
        return Point(float(sum(line.qty for line in order.lines)), 0.0, order.lines[0].sku)

    @app.job(name="typed.route")
    def route(start: Point, *, mode: str = "car") -> Route:
        seen.append(start)
        return Route([start], "bike" if mode == "bike" else "car")

    @app.job(name="typed.points")
    def points(found: list[Point]) -> int:
        seen.append(found)
        return len(found)

    return {"total": total, "route": route, "points": points}


@pytest.fixture
def jobs(app: Conveyor) -> dict[str, Any]:
    seen.clear()
    return register(app)


def test_the_job_receives_typed_objects_and_result_reads_typed(app: Conveyor,
                                                                jobs: dict[str, Any]) -> None:
    order = Order(id=1, lines=[Line(sku="a", qty=2), Line(sku="b", qty=3)])
    ref = jobs["total"].enqueue(order, tag={"name": "x", "weight": 1})
    stored = app.storage.get_job(ref.id)
    assert stored is not None and stored.args == [order.model_dump(mode="json")]  # JSON
    drain(app)
    assert seen == [(order, {"name": "x", "weight": 1})]
    assert isinstance(seen[0][0], Order)
    assert ref.result(timeout=5) == Point(5.0, 0.0, "a")


@pytest.mark.parametrize("way", ["enqueue", "by_name", "many", "signature", "aenqueue"])
def test_a_wrong_field_is_refused_at_enqueue_and_nothing_is_stored(
        app: Conveyor, jobs: dict[str, Any], way: str) -> None:
    bad = {"id": 1, "lines": [{"sku": "a", "qty": "lots"}]}
    fn = jobs["total"]
    with pytest.raises(TypeError) as caught:
        if way == "enqueue":
            fn.enqueue(bad)
        elif way == "by_name":
            app.enqueue("typed.total", [bad])
        elif way == "many":
            fn.enqueue_many([[bad]])
        elif way == "signature":
            fn.s(bad).enqueue()
        else:
            import asyncio
            asyncio.run(fn.aenqueue(bad))
    text = str(caught.value)
    assert "argument 'order': field lines.0.qty" in text and "\n" not in text
    assert app.storage.count_jobs() == 0


def test_enqueue_many_converts_every_item(app: Conveyor, jobs: dict[str, Any]) -> None:
    refs = jobs["route"].enqueue_many([[Point(i, i)] for i in range(5)] + [{"start": {"x": 9,
                                                                                     "y": 9}}])
    drain(app)
    assert sorted(p.x for p in seen) == [0, 1, 2, 3, 4, 9]
    assert [r.result(timeout=5).points[0].x for r in refs] == [0, 1, 2, 3, 4, 9]


def test_a_chain_hands_a_typed_result_to_a_typed_parameter(app: Conveyor,
                                                           jobs: dict[str, Any]) -> None:
    """The total's ``Point`` result is the route's ``start``: stored as JSON between them."""
    run = chain(jobs["total"].s(Order(id=2, lines=[Line(sku="z", qty=4)])),
                jobs["route"].s(mode="bike")).enqueue()
    drain(app)
    assert run.result(timeout=5) == Route([Point(4.0, 0.0, "z")], "bike")
    assert isinstance(seen[-1], Point)


def test_a_parent_result_that_does_not_fit_the_child_ends_the_child_dead_naming_node_and_field(
        app: Conveyor, jobs: dict[str, Any]) -> None:
    """A workflow node's parents' results reach it in the store, where no Python of the app
    runs: the worker validates them when the node starts, and the node ends dead with one
    line naming it and the field (docs/job-data.md)."""
    @app.job(name="typed.raw")
    def raw() -> dict[str, Any]:
        return {"x": "not a number", "y": 1}

    wf = app.workflow()
    parent = wf.add(raw.s())
    child = wf.add(jobs["route"].s(), after=[parent], results="one")
    wf.enqueue()
    drain(app)
    record = app.get_job(child.id)
    assert record is not None and record.state is JobState.DEAD
    assert record.message is not None and "\n" not in record.message
    assert child.id in record.message and "argument 'start': field x" in record.message
    assert seen == []  # never called


def test_a_fan_in_node_gets_its_parents_results_typed(app: Conveyor,
                                                      jobs: dict[str, Any]) -> None:
    wf = app.workflow()
    parents = [wf.add(jobs["total"].s(Order(id=i, lines=[Line(sku=f"s{i}", qty=i)])))
               for i in (1, 2)]
    node = wf.add(jobs["points"].s(), after=parents, results=True)
    wf.enqueue()
    drain(app)
    assert node.result(timeout=5) == 2
    assert seen[-1] == [Point(1.0, 0.0, "s1"), Point(2.0, 0.0, "s2")]


def test_a_periodic_schedule_stores_its_typed_arguments_as_json(app: Conveyor,
                                                                jobs: dict[str, Any]) -> None:
    app.periodic("* * * * *", name="typed-tick", args=(Point(1, 2),))(jobs["route"])
    [schedule] = [s for s in app.schedules.declared if s.name == "typed-tick"]
    assert schedule.args == ({"x": 1.0, "y": 2.0, "label": ""},)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.builds(Order, id=st.integers(), lines=st.lists(
    st.builds(Line, sku=st.text(), qty=st.integers()), min_size=1, max_size=3)))
def test_property_a_typed_payload_round_trips_exactly_through_the_store(
        app: Conveyor, jobs: dict[str, Any], order: Order) -> None:
    """Whatever the order, the job gets an equal one and its typed result reads back equal."""
    seen.clear()
    ref = jobs["total"].enqueue(order)
    drain(app)
    assert seen == [(order, None)]
    assert ref.result(timeout=5) == Point(float(sum(line.qty for line in order.lines)), 0.0,
                                          order.lines[0].sku)
