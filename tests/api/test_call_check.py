"""Arguments are checked against the job function's signature at enqueue (issue 50): a call
that could never run raises ``TypeError`` in one line and stores nothing.

Celery checks a call the same way at ``.delay()`` (its t/unit/tasks/test_tasks.py::
test_tasks::test_typing: ``add(x, y, kw=1)`` refuses ``delay(1)``, ``delay(1, kw=2)`` and
``delay(1, 2, foobar=3)``). Before issue 50 conveyor stored ``double.enqueue(1, 2, 3)``; the
worker's ``TypeError`` was retried 25 times over about 25 days, and a workflow waiting on it
stalled.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor import Conveyor, JobState


def stored(app: Conveyor) -> int:
    return sum(len(app.storage.list_jobs(state=s, limit=100)) for s in
               (JobState.PENDING, JobState.WAITING, JobState.SCHEDULED))


def one_line(exc: pytest.ExceptionInfo[TypeError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_call_that_cannot_bind_is_refused_before_anything_is_stored(app: Conveyor) -> None:
    """Celery test_tasks.py::test_typing, and issue 50's ``double.enqueue(1, 2, 3)``."""
    @app.job(name="t.add")
    def add(x: int, y: int, kw: int = 1) -> int:
        return x + y + kw

    @app.job(name="t.double")
    def double(rows: int) -> int:
        return rows * 2

    with pytest.raises(TypeError) as raised:
        double.enqueue(1, 2, 3)
    assert "cannot call t.double(rows)" in one_line(raised)
    assert "too many positional arguments" in one_line(raised)
    for args, kwargs in (((1,), {}), ((1,), {"kw": 2}), ((1, 2), {"foobar": 3})):
        with pytest.raises(TypeError):
            add.enqueue(*args, **kwargs)
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        app.enqueue("t.add", [1])
    with pytest.raises(TypeError):
        asyncio.run(add.aenqueue(1))
    with pytest.raises(TypeError):
        add.enqueue_in(10, 1)
    assert stored(app) == 0
    assert add.enqueue(2, 2) is not None and add.enqueue(1, 2, kw=3) is not None
    assert app.enqueue("somewhere.else", [1, 2, 3]) is not None  # not ours: not checked
    assert stored(app) == 3


@pytest.mark.parametrize("middleware", [False, True], ids=["bulk", "middleware"])
def test_enqueue_many_names_the_first_bad_item(app: Conveyor, middleware: bool) -> None:
    """Issue 50: ``enqueue_many`` checks each item and names the first that cannot bind;
    the items before it are stored, as for an item that is not JSON."""
    @app.job(name="t.pair")
    def pair(a: int, b: int = 0) -> int:
        return a + b

    if middleware:
        app.client_middleware.add(lambda draft, call_next: call_next())
    with pytest.raises(TypeError) as raised:
        pair.enqueue_many([(1,), (1, 2), (1, 2, 3), (4,)])
    assert one_line(raised).startswith("enqueue_many item 2: cannot call t.pair(")
    assert stored(app) == 2
    with pytest.raises(TypeError, match=r"enqueue_many item 1: .*unexpected keyword"):
        pair.enqueue_many([{"a": 1}, {"a": 1, "c": 2}])
    with pytest.raises(TypeError, match=r"enqueue_many item 0: .*missing"):
        pair.enqueue_many([((), {"b": 1})])


def test_a_workflow_node_counts_the_results_it_will_receive(app: Conveyor) -> None:
    """Issue 50: a node's arguments are checked with the parents' results it is given in
    front of them; a chain's step with one argument too many is refused at build time."""
    @app.job(name="t.add")
    def add(x: int, y: int) -> int:
        return x + y

    wf = app.workflow()
    a = wf.add(add.s(1, 2))
    wf.add(add.s(10), after=[a], results="one")  # add(3, 10)
    with pytest.raises(TypeError, match="after the 1 value it receives: too many"):
        wf.add(add.s(1, 2), after=[a], results="one")
    with pytest.raises(TypeError, match="missing a required argument"):
        wf.add(add.s(), after=[a], results=True)
    with pytest.raises(TypeError):
        add.map([1, 2])  # add(1) cannot bind
    with pytest.raises(TypeError, match="starmap item 1"):
        add.starmap([(1, 2), (1, 2, 3)])
    assert stored(app) == 0


def test_periodic_arguments_are_checked_when_the_schedule_is_declared(app: Conveyor) -> None:
    with pytest.raises(TypeError, match="periodic schedule"):
        @app.periodic("* * * * *", args=(1, 2))
        def tick(n: int) -> None: ...


def test_functions_that_take_anything_are_never_refused(app: Conveyor) -> None:
    @app.job(name="t.any")
    def anything(*args: Any, **kwargs: Any) -> None: ...

    assert anything.enqueue(1, 2, x=3) is not None
    assert len(anything.enqueue_many([(1,), {"y": 2}, ((1,), {"z": 3})])) == 3
