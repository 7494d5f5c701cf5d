"""Celery's canvas on workflows: chain, group, chord (and map as a group), run on every kind
of store by ``conveyor.testing.drain``: results flow as docs/workflows.md says."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, Fail, JobState, chain, chord, chunks, current_job, group
from conveyor.errors import JobFailed, WorkflowError
from conveyor.testing import drain
from tests.conformance.backends import backend_url


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    app = Conveyor(backend_url(request.param, tmp_path, request.getfixturevalue))

    @app.job(name="t.add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.job(name="t.square")
    def square(x: int) -> int:
        return x * x

    @app.job(name="t.total")
    def total(values: list[int | None]) -> int:
        return sum(v or 0 for v in values)

    @app.job(name="t.refuse", retry=0)
    def refuse(x: int) -> int:
        raise Fail(f"no {x}")

    yield app
    app.close()


def test_a_chain_passes_each_result_to_the_next_step(app: Conveyor) -> None:
    add = app.registry.get("t.add")
    assert add is not None
    run = chain(add.s(1, 2), add.s(10), add.s(100)).enqueue(description="sums")
    assert drain(app) == 3
    assert run.result(timeout=1) == 113  # add(add(add(1, 2), 10), 100)
    status = app.batch_status(run.id)
    assert status["kind"] == "workflow" and status["counts"]["succeeded"] == 3


def test_a_chord_gets_its_header_results_in_the_order_written(app: Conveyor) -> None:
    square, total = app.registry.get("t.square"), app.registry.get("t.total")
    assert square is not None and total is not None
    run = chord([square.s(i) for i in (3, 1, 2)], total.s()).enqueue()
    drain(app)
    body = app.get_job(run.tails[0].id)
    assert body is not None and body.args == [[9, 1, 4]]
    assert run.result(timeout=1) == 14


def test_a_group_and_a_group_inside_a_chain(app: Conveyor) -> None:
    square, add, total = (app.registry.get(n) for n in ("t.square", "t.add", "t.total"))
    assert square is not None and add is not None and total is not None
    mapped = group(square.s(i) for i in range(4)).enqueue()  # Celery's map
    drain(app)
    assert mapped.result(timeout=1) == [0, 1, 4, 9]
    # square(2) = 4; each member of the group gets 4; the last step gets both results
    run = chain(square.s(2), group(add.s(1), add.s(2)), total.s()).enqueue()
    drain(app)
    assert run.result(timeout=1) == 11
    ends_in_group = chain(square.s(3), group(add.s(1), add.s(2))).enqueue()
    drain(app)
    assert ends_in_group.result(timeout=1) == [10, 11]


def test_a_failed_header_member_fails_the_chord_or_not_by_policy(app: Conveyor) -> None:
    square, refuse, total = (app.registry.get(n) for n in ("t.square", "t.refuse", "t.total"))
    assert square is not None and refuse is not None and total is not None
    strict = chord([square.s(2), refuse.s(7)], total.s()).enqueue()
    drain(app)
    body = app.get_job(strict.tails[0].id)
    assert body is not None and body.state is JobState.FAILED
    assert body.message is not None and body.message.endswith("ended failed: no 7")
    with pytest.raises(JobFailed):
        strict.result(timeout=1)
    lenient = chord([square.s(2), refuse.s(7)], total.s()).enqueue(
        on_parent_failure="continue")
    drain(app)
    assert lenient.result(timeout=1) == 4  # total([4, None])


def test_an_empty_group_gives_an_empty_list_and_a_bad_results_mode_is_refused(
        app: Conveyor) -> None:
    """Celery test_canvas.py::test_group::test_empty_group_result: an empty group's result
    is ``[]`` (it was refused with "no step" before issue 50)."""
    run = group().enqueue(app=app)
    drain(app)
    assert run.result(timeout=1) == []
    square = app.registry.get("t.square")
    assert square is not None
    wf = app.workflow()
    a, b = wf.add(square.s(1)), wf.add(square.s(2))
    with pytest.raises(WorkflowError, match="results must be"):
        wf.add(square.s(), after=[a, b], results="one")


def test_map_and_starmap_are_one_job_over_the_items(app: Conveyor) -> None:
    square, add, total = (app.registry.get(n) for n in ("t.square", "t.add", "t.total"))
    assert square is not None and add is not None and total is not None
    run = chain(square.map([1, 2, 3]), total.s()).enqueue()
    assert drain(app) == 2
    assert run.result(timeout=1) == 14
    starred = add.starmap([(1, 2), (3, 4)]).enqueue()
    assert starred is not None
    drain(app)
    assert starred.result(timeout=1) == [3, 7]
    assert "conveyor.map" not in app.registry.names()  # built in: found, not listed


def test_chunks_cut_many_calls_into_fewer_jobs(app: Conveyor) -> None:
    add = app.registry.get("t.add")
    assert add is not None
    run = chunks(add, zip(range(7), range(7), strict=True), 3).enqueue()
    assert drain(app) == 3  # 7 calls in chunks of 3
    assert run.result(timeout=1) == [[0, 2, 4], [6, 8, 10], [12]]
    with pytest.raises(WorkflowError, match="size"):
        chunks(add, [(1, 2)], 0)


def test_an_item_that_fails_fails_its_map_job(app: Conveyor) -> None:
    refuse = app.registry.get("t.refuse")
    assert refuse is not None
    run = group(refuse.map([1, 2])).enqueue()
    drain(app)
    record = run.tails[0].status()
    assert record is not None and record.state is JobState.FAILED
    assert record.message == "no 1"


def test_a_canvas_workflow_is_described_by_its_shape() -> None:
    """A workflow built from Celery's canvas gets a default description, its shape, so the
    workflow list reads as more than a column of ids (issue 51; Flower and Celery's
    ``chain.__repr__`` show ``extract() | double() | double()``). A description given wins.
    Store-independent (the description is written by the client): memory only."""
    app = Conveyor("memory://")

    @app.job(name="etl.extract")
    def extract() -> int:
        return 1

    @app.job(name="etl.double")
    def double(x: int) -> int:
        return 2 * x

    @app.job(name="etl.merge")
    def merge(values: list[int]) -> int:
        return sum(values)

    def described(run: Any) -> str:
        return str(app.batch_status(run.id)["description"])

    assert described(chain(extract.s(), double.s(), double.s()).enqueue()) == (
        "chain: extract → double → double")
    assert described(chord([double.s(i) for i in range(20)], merge.s()).enqueue()) == (
        "chord: double ×20 → merge")
    assert described(group(double.s(1), extract.s(), double.s(2)).enqueue()) == (
        "group: double, extract, double")
    assert described(chain(extract.s(), group(double.s(), double.s()), merge.s()).enqueue()
                     ) == "chain: extract → double ×2 → merge"
    assert described(chunks(double, [(i,) for i in range(9)], 3).enqueue()) == (
        "group: starmap(double) ×3")
    assert described(chain(double.s(1), double.s()).enqueue(description="mine")) == "mine"
    long = described(group(double.s(i) if i % 2 else extract.s() for i in range(80)).enqueue())
    assert len(long) == 200 and long.endswith("…")
    app.close()


def test_apply_async_schedules_the_first_steps_with_arguments_queue_and_links(
        app: Conveyor) -> None:
    """Celery's ``apply_async(args, kwargs, countdown=, eta=, queue=, link=)`` on a canvas and
    a signature (its integration test_chain::test_chain_error_handler_with_eta delays a
    chain): the first steps get the arguments in front of theirs and start ``countdown``
    seconds later, every job goes to ``queue``, a link is stored after the job."""
    add, total = app.registry.get("t.add"), app.registry.get("t.total")
    assert add is not None and total is not None
    run = chain(group(add.s(1), add.s(2)), total.s()).apply_async(
        args=(10,), countdown=3600, queue="later")
    jobs = {r.id: r for r in app.batch_jobs(run.id, limit=10)}
    first = [r for r in jobs.values() if r.name == "t.add"]
    assert [r.state for r in first] == [JobState.SCHEDULED] * 2
    assert sorted(r.args for r in first) == [[10, 1], [10, 2]]
    assert {r.queue for r in jobs.values()} == {"later"}
    assert jobs[run.tails[0].id].state is JobState.WAITING
    ref = add.s(5).apply_async(args=(1,), link=add.s(100), link_error=add.si(0, 0))
    assert ref is not None
    record = app.get_job(ref.id)
    assert record is not None and record.batch_id is not None and record.args == [1, 5]
    drain(app, queues=["default"])
    assert ref.result(timeout=1) == 6
    linked = [r for r in app.batch_jobs(record.batch_id, limit=10) if r.id != ref.id]
    assert sorted((r.name, r.result) for r in linked) == [
        ("conveyor.errback", "null"), ("t.add", "106")]  # the errback saw a success


def test_a_signature_with_callbacks_is_placed_whole_or_refused(app: Conveyor) -> None:
    """``wf.add`` places one node: a signature with callbacks would lose them, so it is
    refused and ``add_workflow(chain(sig))`` places them; at run time an errback watches the
    node under the id it is stored with (an added node's id is derived)."""
    add, refuse = app.registry.get("t.add"), app.registry.get("t.refuse")
    assert add is not None and refuse is not None
    sig = add.s(1, 2)
    sig.link(add.s(3))
    wf = app.workflow()
    with pytest.raises(WorkflowError, match="add_workflow"):
        wf.add(sig)
    [tail] = wf.add_workflow(chain(sig))
    wf.enqueue()
    drain(app)
    assert tail.result(timeout=1) == 3
    assert sorted(r.result or "" for r in app.batch_jobs(wf.id, limit=10)) == ["3", "6"]

    @app.job(name="t.seen", retry=0)
    def seen(job_id: str, error: Exception, traceback: str) -> list[str]:
        return [job_id, type(error).__name__, str(error)]

    @app.job(name="t.spawn", retry=0)
    def spawn() -> None:
        failing = refuse.s(7)
        failing.link_error(seen.s())
        current_job().workflow.add_workflow(chain(failing))

    wf = app.workflow()
    wf.add(spawn.s())
    wf.enqueue()
    drain(app)
    jobs = app.batch_jobs(wf.id, limit=10)
    [failed] = [r for r in jobs if r.name == "t.refuse"]
    [errback] = [r for r in jobs if r.name == "conveyor.errback"]
    assert failed.state is JobState.FAILED and errback.result is not None
    assert json.loads(errback.result) == [failed.id, "JobFailed",
                                          f"job {failed.id} ended failed: no 7"]
