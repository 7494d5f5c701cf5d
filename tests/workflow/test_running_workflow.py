"""A running job adds nodes to its own workflow (``current_job().workflow``), on every kind of
store, run by ``conveyor.testing.drain``: children wait for it, fan in with their results, and
a retried job adds the same nodes again without doubling them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, Workflow, chord, current_job
from conveyor.errors import WorkflowError
from conveyor.testing import drain
from tests.conformance.backends import backend_url


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    app = Conveyor(backend_url(request.param, tmp_path, request.getfixturevalue))

    @app.job(name="t.page", retry=0)
    def page(n: int) -> int:
        return n * 10

    @app.job(name="t.index", retry=0)
    def index(pages: list[int], label: str) -> str:
        return f"{label}: {sum(pages)}"

    @app.job(name="t.crawl", retry=3, retry_in=lambda attempt, exc: 0.0)
    def crawl(count: int, flaky: bool = False) -> int:
        wf = current_job().workflow
        pages = wf.add_group([page.s(i) for i in range(count)], after=[current_job().node])
        wf.add(index.s("site"), after=pages, results=True)
        if flaky and current_job().attempt == 1:
            raise RuntimeError("network blip after adding")  # retried: adds the same again
        return count

    @app.job(name="t.loose", retry=0)
    def loose() -> None:
        current_job().workflow.add(page.s(1))

    yield app
    app.close()


def _fn(app: Conveyor, name: str):  # type: ignore[no-untyped-def]
    fn = app.registry.get(name)
    assert fn is not None
    return fn


def test_a_running_job_fans_out_and_in(app: Conveyor) -> None:
    wf = app.workflow(description="crawl")
    root = wf.add(_fn(app, "t.crawl").s(4))
    wf.enqueue()
    assert drain(app) == 1 + 4 + 1
    status = app.batch_status(wf.id)
    assert status["total"] == 6 and status["complete"]
    assert status["counts"]["succeeded"] == 6
    rows = app.batch_jobs(wf.id, limit=100)
    index = [r for r in rows if r.name == "t.index"]
    assert [r.result for r in index] == ['"site: 60"']
    assert root.result(timeout=1) == 4


def test_a_retried_job_adds_its_nodes_once(app: Conveyor) -> None:
    wf = app.workflow()
    wf.add(_fn(app, "t.crawl").s(3, flaky=True))
    wf.enqueue()
    drain(app)
    status = app.batch_status(wf.id)
    assert status["total"] == 1 + 3 + 1 and status["complete"]
    assert status["counts"]["succeeded"] == 5


def test_a_job_outside_a_workflow_cannot_add(app: Conveyor) -> None:
    ref = _fn(app, "t.loose").enqueue()
    drain(app)
    record = ref.status()
    assert record is not None and record.state.value == "dead"
    assert "is not part of a workflow" in (record.message or "")


def test_a_workflow_built_by_hand_may_grow_too(app: Conveyor) -> None:
    wf = Workflow(app.client)
    first = wf.add(_fn(app, "t.crawl").s(2))
    wf.add(_fn(app, "t.page").s(7), after=[first])
    wf.enqueue()
    drain(app)
    status = app.batch_status(wf.id)
    assert status["total"] == 5 and status["counts"]["succeeded"] == 5


def test_unknown_parents_are_refused_in_the_job(app: Conveyor) -> None:
    @app.job(name="t.bad_parent", retry=0)
    def bad_parent() -> None:
        current_job().workflow.add(_fn(app, "t.page").s(1), after=["no-such-node"])

    wf = app.workflow()
    node = wf.add(bad_parent.s())
    wf.enqueue()
    drain(app)
    record = node.status()
    assert record is not None and record.state.value == "dead"
    assert "no-such-node is not a node of workflow" in (record.message or "")
    with pytest.raises(WorkflowError):
        Workflow(app.client).enqueue()


def test_a_sub_workflow_is_one_node_of_its_parent(app: Conveyor) -> None:
    page, index = _fn(app, "t.page"), _fn(app, "t.index")
    sub = Workflow(app.client)
    x = sub.add(page.s(1))
    sub.add(page.s(2), after=[x], results=False)
    sub.add(page.s(3))
    wf = app.workflow()
    first = wf.add(page.s(0))
    last = wf.add_workflow(sub, after=[first])
    assert len(last) == 2  # the sub-workflow's last nodes: page(2) and page(3)
    end = wf.add(index.s("sub"), after=last, results=True)
    wf.enqueue()
    with pytest.raises(WorkflowError, match="enqueued already"):
        sub.enqueue()
    drain(app)
    assert end.result(timeout=1) == "sub: 50"
    assert x.result(timeout=1) == 10  # the sub-workflow's refs stay valid
    status = app.batch_status(wf.id)
    assert status["total"] == 5 and status["counts"]["succeeded"] == 5


def test_a_failure_inside_a_sub_workflow_settles_its_edge(app: Conveyor) -> None:
    @app.job(name="t.refuse", retry=0)
    def refuse() -> None:
        raise RuntimeError("bad row")

    sub = Workflow(app.client)
    sub.add(refuse.s())
    wf = app.workflow()
    last = wf.add_workflow(sub)
    end = wf.add(_fn(app, "t.page").s(1), after=last)
    wf.enqueue()
    drain(app)
    record = end.status()
    assert record is not None and record.state.value == "failed"
    assert "bad row" in (record.message or "")
    with_callback = Workflow(app.client, on_complete=refuse)
    with_callback.add(refuse.s())
    with pytest.raises(WorkflowError, match="callbacks"):
        app.workflow().add_workflow(with_callback)


def test_a_running_job_adds_a_whole_canvas(app: Conveyor) -> None:
    page, index = _fn(app, "t.page"), _fn(app, "t.index")

    @app.job(name="t.expand", retry=2, retry_in=lambda attempt, exc: 0.0)
    def expand(count: int) -> None:
        wf = current_job().workflow
        wf.add_workflow(chord([page.s(i) for i in range(count)], index.s("chord")),
                        after=[wf.node])
        if current_job().attempt == 1:
            raise RuntimeError("retried after adding: the same nodes again")

    wf = app.workflow()
    wf.add(expand.s(3))
    wf.enqueue()
    drain(app)
    status = app.batch_status(wf.id)
    assert status["total"] == 1 + 3 + 1 and status["complete"]
    rows = app.batch_jobs(wf.id, limit=100)
    assert [r.result for r in rows if r.name == "t.index"] == ['"chord: 30"']
