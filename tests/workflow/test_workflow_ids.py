"""Workflow node ids on every kind of store (issue 49, item 4; docs/workflows.md, "Node ids").

A node id a caller chooses (``node_id=``, ``workflow_id=``) is validated like every id: 1 to
128 ASCII letters, digits, ``-``, ``_``, ``.`` and ``:``; anything else is one line, never a
raw ``UnicodeEncodeError``. A node id that is the id of any stored job is refused, at
``enqueue`` of the workflow (nothing stored) and at ``add`` while it runs, the same on every
store: before, the store kept the other job, the node never existed and its children waited
for it for good.

Where the expectation comes from: issue 49's Medium finding; BullMQ refuses a custom job id
that is an integer or holds ``:`` and tells a flow whose child id is taken, Hatchet and
Temporal refuse a workflow id already in use rather than join it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState, Workflow, current_job
from conveyor.errors import WorkflowError
from conveyor.testing import drain
from tests.conformance.backends import backend_url

BAD_IDS: list[Any] = [5, "", "x" * 100_000, "pages/3", "line\nbreak", "lone\ud800", "a b"]


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis", "redis_cluster"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    app = Conveyor(backend_url(request.param, tmp_path, request.getfixturevalue))

    @app.job(name="ids.step", retry=0)
    def step(n: int) -> int:
        return n

    @app.job(name="ids.once", retry=0, unique_for=600, unique_key=lambda n: "once")
    def once(n: int) -> int:
        return n

    @app.job(name="ids.grow", retry=0)
    def grow(node_id: Any) -> str:
        try:
            current_job().workflow.add(step.s(1), node_id=node_id, after=[current_job().node])
        except WorkflowError as exc:
            return str(exc)
        return "added"

    yield app
    app.close()


def _fn(app: Conveyor, name: str) -> Any:
    fn = app.registry.get(name)
    assert fn is not None
    return fn


def test_a_node_id_that_is_not_an_id_is_refused_in_one_line(app: Conveyor) -> None:
    step = _fn(app, "ids.step")
    for bad in BAD_IDS:
        wf = app.workflow()
        with pytest.raises(WorkflowError) as info:
            wf.add(step.s(1), node_id=bad)
        text = str(info.value)
        assert "node id" in text and "\n" not in text and len(text) < 300, repr(bad)[:40]
        with pytest.raises(WorkflowError, match="workflow id"):
            Workflow(workflow_id=bad)
    assert sum(app.storage.count_jobs(state=s) for s in JobState) == 0


def test_a_node_id_of_a_stored_job_is_refused_at_enqueue_and_nothing_is_stored(
        app: Conveyor) -> None:
    step = _fn(app, "ids.step")
    other = app.enqueue("other_app.job", queue="other")
    assert other is not None
    wf = app.workflow()
    first = wf.add(step.s(1), node_id=other.id)
    wf.add(step.s(2), after=[first])
    with pytest.raises(WorkflowError, match="a node id must be new") as info:
        wf.enqueue()
    assert other.id in str(info.value) and "\n" not in str(info.value)
    assert app.storage.get_batch(wf.id) is None
    assert sum(app.storage.count_jobs(state=s) for s in JobState) == 1
    record = app.get_job(other.id)
    assert record is not None
    assert (record.state, record.name, record.batch_id) == (JobState.PENDING, "other_app.job",
                                                            None)


def test_a_node_id_of_a_stored_job_is_refused_at_run_time(app: Conveyor) -> None:
    other = app.enqueue("other_app.job", queue="other")
    assert other is not None
    wf = app.workflow()
    grower = wf.add(_fn(app, "ids.grow").s(other.id))
    late = wf.add(_fn(app, "ids.grow").s("pages/3"), after=[grower])
    wf.enqueue()
    drain(app, queues=["default"])
    said = grower.result(timeout=1)
    assert "a node id must be new" in said and other.id in said and "\n" not in said
    assert "may hold only" in late.result(timeout=1)
    status = app.batch_status(wf.id)
    assert status["total"] == 2 and status["complete"]
    record = app.get_job(other.id)
    assert record is not None and record.state is JobState.PENDING and record.batch_id is None


def test_a_node_the_store_did_not_create_cancels_the_workflow_and_is_refused(
        app: Conveyor) -> None:
    """The store leaves a node out when its unique key is held (or, in a race, its id was
    taken after the check): its children would wait for it for good. The workflow is
    cancelled as it stands, so it ends, and the caller is told in one line."""
    holder = _fn(app, "ids.once").enqueue(0)
    assert holder is not None
    wf = app.workflow()
    first = wf.add(_fn(app, "ids.once").s(1))
    child = wf.add(_fn(app, "ids.step").s(2), after=[first])
    with pytest.raises(WorkflowError, match="holds its unique key") as info:
        wf.enqueue()
    assert holder.id in str(info.value) and "\n" not in str(info.value)
    status = app.batch_status(wf.id)
    assert status["complete"]
    record = child.status()  # ended (cancelled; failed on Redis, its parent never stored)
    assert record is not None and record.state.terminal
