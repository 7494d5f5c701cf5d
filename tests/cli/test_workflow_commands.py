"""``conveyor workflow list|show|watch|cancel`` and the waiting state in ``stats``."""

from __future__ import annotations

from conveyor.workflow import Workflow
from tests.cli.conftest import Env


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
    assert code == 2 and out == "" and "no batch with id 'nope'" in err
    code, out, _ = env.run("workflow", "watch", wf.id, "--timeout", "5")
    assert code == 0 and "cancelled 3" in out
