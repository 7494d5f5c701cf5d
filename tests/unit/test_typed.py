"""Typed job data (conveyor/core/typed.py, conveyor/core/calls.py): a pydantic model, a
dataclass or a TypedDict as a parameter or return annotation validates at enqueue, is stored
as JSON and comes back typed, exactly.

Expectations from Celery 5.5's ``pydantic=True`` tasks (arguments validated into the
annotated model, the return value dumped with ``model_dump``), taskiq and Hatchet (pydantic
inputs validated before anything runs), and Oban Pro's structured args (a wrong field refused
at insert, naming the field).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conveyor.core.calls import CallShape
from conveyor.core.typed import _Plain, adapter_for
from conveyor.errors import TypedDataError
from tests.api.typed_models import Line, Order, Point, Route, Tag


def place(order: Order, where: Point, tag: Tag, note: str = "") -> Route:
    return Route([where])


SHAPE = CallShape(place, "shop.place")


def test_only_model_annotations_are_typed() -> None:
    """``int`` or ``str`` annotations are left as they were: checked for JSON-ness only."""
    assert adapter_for(int) is None and adapter_for(str) is None
    assert adapter_for(Order) is not None and adapter_for(list[Point]) is not None
    assert adapter_for(Tag | None) is not None
    assert SHAPE.typed


def test_a_call_is_made_json_and_made_typed_again() -> None:
    order = Order(id=7, lines=[Line(sku="a", qty=2)],
                  placed=datetime(2026, 1, 2, tzinfo=timezone.utc))
    args, kwargs = SHAPE.convert([order, Point(1.5, 2.0)], {"tag": {"name": "t", "weight": 3}})
    json.dumps([list(args), dict(kwargs)])  # stored as JSON, nothing else
    assert args[0] == {"id": 7, "lines": [{"sku": "a", "qty": 2}],
                       "placed": "2026-01-02T00:00:00Z"}
    typed, named = SHAPE.load(args, kwargs)
    assert typed[0] == order and typed[1] == Point(1.5, 2.0)
    assert named["tag"] == {"name": "t", "weight": 3}


def test_a_dict_for_a_model_is_validated_into_it() -> None:
    args, _ = SHAPE.convert([{"id": "7", "lines": []}, {"x": 1, "y": 2}, {"name": "t",
                                                                         "weight": 1}], {})
    assert args[0] == {"id": 7, "lines": [], "placed": None}  # coerced as pydantic does


@pytest.mark.parametrize(("call", "named"), [
    (([{"id": 1, "lines": [{"sku": "a", "qty": "many"}]}, Point(0, 0), {"name": "t",
                                                                        "weight": 1}], {}),
     "argument 'order': field lines.0.qty"),
    (([Order(id=1, lines=[]), {"x": 1}, {"name": "t", "weight": 1}], {}),
     "argument 'where': field y"),
    (([Order(id=1, lines=[]), Point(0, 0)], {"tag": {"name": "t"}}),
     "argument 'tag': field weight"),
])
def test_a_wrong_field_is_refused_in_one_line_naming_it(call: Any, named: str) -> None:
    with pytest.raises(TypeError) as caught:
        SHAPE.convert(*call)
    text = str(caught.value)
    assert named in text and "\n" not in text and text.startswith("shop.place: ")
    assert isinstance(caught.value, TypedDataError)


def test_a_stored_value_that_no_longer_validates_is_refused_when_loaded() -> None:
    with pytest.raises(TypedDataError, match="argument 'order': field id"):
        SHAPE.load([{"id": "x", "lines": []}, {"x": 0, "y": 0}, {"name": "t", "weight": 1}], {})


def test_a_typed_return_is_dumped_and_loaded() -> None:
    route = Route([Point(1, 2, "a")], "bike")
    stored = SHAPE.dump_result(route)
    assert stored == {"points": [{"x": 1.0, "y": 2.0, "label": "a"}], "mode": "bike"}
    assert SHAPE.load_result(json.loads(json.dumps(stored))) == route
    with pytest.raises(TypedDataError, match="returned a value that is not its return type"):
        SHAPE.dump_result({"points": "nope"})


def test_the_plain_converter_serves_dataclasses_and_typeddicts_without_pydantic() -> None:
    """The ``pydantic`` extra is optional: the same shapes convert by conveyor's own code."""
    route = _Plain(Route)
    stored = route.dump(Route([Point(1, 2)], "bike"))
    assert stored == {"points": [{"x": 1, "y": 2, "label": ""}], "mode": "bike"}
    assert route.load(stored) == Route([Point(1.0, 2.0)], "bike")
    with pytest.raises(TypedDataError, match=r"field points\.0\.y: field required"):
        route.dump({"points": [{"x": 1}]})
    with pytest.raises(TypedDataError, match="field mode"):
        route.dump({"points": [], "mode": "plane"})
    with pytest.raises(TypedDataError, match="field nope: not a field of Route"):
        route.load({"points": [], "nope": 1})
    assert _Plain(Tag).load({"name": "n", "weight": 2}) == {"name": "n", "weight": 2}


finite = st.floats(allow_nan=False, allow_infinity=False)
texts = st.text()
points = st.builds(Point, finite, finite, texts)
orders = st.builds(Order, id=st.integers(), lines=st.lists(st.builds(Line, sku=texts,
                                                                      qty=st.integers())),
                   placed=st.none() | st.datetimes(timezones=st.just(timezone.utc)))
tags = st.fixed_dictionaries({"name": texts, "weight": st.integers()})


@given(orders, points, tags)
def test_property_a_typed_call_round_trips_exactly_through_stored_json(
        order: Order, where: Point, tag: Tag) -> None:
    """Whatever the values, enqueue's JSON and the worker's load give back equal objects."""
    args, kwargs = SHAPE.convert([order, where], {"tag": tag})
    text = json.dumps([list(args), dict(kwargs)])  # what the store keeps
    stored_args, stored_kwargs = json.loads(text)
    typed, named = SHAPE.load(stored_args, stored_kwargs)
    assert typed == [order, where] and named == {"tag": tag}


@given(st.lists(points))
def test_property_the_plain_converter_round_trips_exactly(values: list[Point]) -> None:
    adapter = _Plain(list[Point])
    assert adapter.load(json.loads(json.dumps(adapter.dump(values)))) == values
