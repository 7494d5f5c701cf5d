"""``conveyor workflow list|show|watch|cancel`` and the waiting state in ``stats``."""

from __future__ import annotations

import io
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.cli import batches
from conveyor.workflow.graph import Workflow
from tests.cli.conftest import Env, without_store
from tests.worker.helpers import run_one


def _workflow(env: Env) -> tuple[Workflow, list[str]]:
    export = env.app.registry.get("shop.export")
    assert export is not None
    wf = env.app.workflow(description="nightly export")
    first = wf.add(export.s(1))
    second = wf.add(export.s(2), after=[first])
    third = wf.add(export.s(3), after=[second], on_parent_failure="skip")
    wf.enqueue()
    return wf, [first.id, second.id, third.id]


def test_list_and_show_a_workflow_with_its_nodes(env: Env) -> None:
    wf, ids = _workflow(env)
    listed = env.json("workflow", "list")
    assert [w["id"] for w in listed] == [wf.id]  # the seeded batch is not a workflow
    assert listed[0]["counts"]["waiting"] == 2 and listed[0]["kind"] == "workflow"
    code, out, _ = env.run("workflow", "list")
    assert code == 0 and "nightly export" in out and "WAITING" in out
    shown = env.json("workflow", "show", wf.id)
    assert [(n["id"], n["state"]) for n in shown["nodes"]] == [
        (ids[0], "pending"), (ids[1], "waiting"), (ids[2], "waiting")]
    code, out, _ = env.run("workflow", "show", wf.id)
    assert code == 0 and out.startswith(f"workflow {wf.id}  nightly export")
    assert "waiting 2" in out and ids[2] in out
    stats = env.json("stats")
    assert {q["name"]: q["waiting"] for q in stats["queues"]}["exports"] == 2
    assert stats["totals"]["waiting"] == 2


def test_cancel_a_workflow_and_an_unknown_one(env: Env) -> None:
    wf, ids = _workflow(env)
    code, out, _ = env.run("workflow", "cancel", wf.id)
    assert code == 0 and "3 node(s) cancelled" in out
    assert {env.app.storage.get_job(i).state.value for i in ids} == {"cancelled"}  # type: ignore[union-attr]
    code, out, err = env.run("workflow", "show", "nope")
    assert code == 2 and out == "" and "no workflow with id 'nope'" in err
    code, out, _ = env.run("workflow", "watch", wf.id, "--timeout", "5")
    assert code == 0 and "cancelled 3" in out


def test_every_workflow_command_names_a_workflow_as_what_it_did_not_find(env: Env) -> None:
    """A lookup that fails names the kind of thing looked for (kubectl: 'deployments.apps
    "x" not found'; Celery's ``inspect query_task`` names the task): ``workflow show`` of an
    unknown id said "no batch" (issue 51). A batch id is no workflow either; the batch
    commands take a workflow's id, since a workflow is a batch."""
    batch = env.seeded.batch_id
    assert batch is not None
    for action in ("show", "watch", "cancel"):
        code, out, err = env.run("workflow", action, "nosuchid")
        assert (code, out) == (2, ""), err
        assert without_store(err).strip() == "conveyor: error: no workflow with id 'nosuchid'"
        code, _, err = env.run("workflow", action, batch)
        assert code == 2
        assert without_store(err).strip() == (
            f"conveyor: error: no workflow with id '{batch}': it is a batch")
    wf, _ = _workflow(env)
    code, out, _ = env.run("batch", "show", wf.id)
    assert code == 0 and "nightly export" in out
    code, out, err = env.run("batch", "show", "nosuchid")
    assert code == 2 and "no batch with id 'nosuchid'" in err


def test_watch_into_a_pipe_prints_a_line_per_change_not_per_redraw(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/operations.md: "one plain line per change when stdout is not a TTY" (as
    ``kubectl get --watch`` prints an object when it changes). The ETA moves with the clock
    alone, so it is no change: here the store's clock jumps a minute at every redraw, the
    counts stay put for five redraws, then the workflow is cancelled. Two lines: before and
    after (issue 51: a pipe got a line every second)."""
    clock = FakeClock()
    app = Conveyor("memory://", clock=clock)

    @app.job(name="step")
    def step(n: int) -> int:
        return n

    wf = app.workflow(description="three steps")
    first = wf.add(step.s(1))
    wf.add(step.s(2), after=[first])
    wf.add(step.s(3))
    wf.enqueue()
    run_one(app)  # one node done: the ETA has a rate to go by
    redraws: list[int] = []
    real = batches.batch_view

    def view(backend: Any, batch_id: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        redraws.append(1)
        clock.advance(60)
        if len(redraws) == 5:
            app.storage.cancel_batch(batch_id)
        return real(backend, batch_id, *args, **kwargs)

    monkeypatch.setattr(batches, "batch_view", view)
    out = io.StringIO()
    assert batches.watch(app.storage, wf.id, out, 0.001, None) is True
    lines = out.getvalue().splitlines()
    assert len(redraws) >= 5
    assert len(lines) == 2, lines
    assert "1/3" in lines[0] and "cancelled 2" in lines[1]
