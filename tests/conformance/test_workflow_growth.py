"""Workflows that grow while they run: ``Storage.add_nodes`` on every backend.

A running node adds nodes to its own workflow, fenced by its lease; each new node counts only
the parents that have not settled yet, in the same atomic step as it is linked into their
children, and one whose parents have all settled is decided at once (docs/workflows.md).
"""

from __future__ import annotations

import json

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, EventKind, JobSpec, JobState, LeasedJob, Node, Outcome
from conveyor.errors import WorkflowError
from conveyor.storage import Backend
from tests.conformance.helpers import ack, boom, kinds_of, new_job_id, put, spec, state_of, take
from tests.conformance.test_workflows import Graph


def _lease(backend: Backend, g: Graph, name: str, lease: float = 30.0) -> LeasedJob:
    """Lease the named pending node alone (others leased with it are handed back)."""
    leased = take(backend, ["wf"], count=100, lease=lease)
    found = [j for j in leased if j.id == g.ids[name]]
    assert found, f"{name} was not pending"
    for job in leased:
        if job.id != g.ids[name]:
            assert ack(backend, job, Outcome.INTERRUPTED)
    return found[0]


def _node(g: Graph, name: str, parents: list[str], policy: str = "fail",
          results: str = "") -> JobSpec:
    job_id = new_job_id(name)
    g.ids[name] = job_id
    return spec("wf", name=f"step.{name}", args=[name], job_id=job_id, batch_id=g.id,
                node=Node(tuple(g.ids.get(p, p) for p in parents), (), policy, results))


def test_a_child_added_after_the_running_node_waits_for_it(backend: Backend) -> None:
    g = Graph(backend, {"a": []})
    job = _lease(backend, g, "a")
    stored = backend.add_nodes(job.id, job.token, [_node(g, "b", ["a"], results="one")])
    assert stored is not None and [r.created for r in stored] == [True]
    assert g.state("b") is JobState.WAITING
    status = backend.get_batch(g.id)
    assert status is not None and status.total == 2 and not status.complete
    assert ack(backend, job, Outcome.SUCCEEDED, result=json.dumps({"pages": 3}))
    assert g.state("b") is JobState.PENDING
    record = backend.get_job(g.ids["b"])
    assert record is not None and record.args[0] == {"pages": 3}  # the parent's result
    done = _lease(backend, g, "b")
    assert ack(backend, done, Outcome.SUCCEEDED)
    status = backend.get_batch(g.id)
    assert status is not None and status.complete and status.counts.get("succeeded") == 2


def test_a_child_of_settled_parents_is_decided_at_once(backend: Backend) -> None:
    g = Graph(backend, {"ok": [], "bad": [], "runner": ["ok", "bad"]},
              policy={"runner": "continue"})
    g.run("ok")
    g.run("bad", Outcome.DEAD, error=boom("no route"))
    runner = _lease(backend, g, "runner")
    specs = [_node(g, "after_ok", ["ok"]), _node(g, "after_bad", ["bad"]),
             _node(g, "skipper", ["bad"], policy="skip"), _node(g, "root", []),
             _node(g, "chained", ["after_ok"])]
    stored = backend.add_nodes(runner.id, runner.token, specs)
    assert stored is not None and all(r.created for r in stored)
    assert g.state("after_ok") is JobState.PENDING
    assert g.state("after_bad") is JobState.FAILED
    assert "no route" in (g.message("after_bad") or "")
    assert g.state("skipper") is JobState.CANCELLED
    assert g.state("root") is JobState.PENDING
    assert g.state("chained") is JobState.WAITING  # its parent, added with it, is pending
    assert kinds_of(backend, g.ids["after_ok"]).count(EventKind.RELEASED) == 1


def test_a_stale_lease_adds_nothing(backend: Backend, clock: FakeClock) -> None:
    g = Graph(backend, {"a": []})
    stale = _lease(backend, g, "a", lease=10)
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    before = backend.get_batch(g.id)
    assert backend.add_nodes(stale.id, stale.token, [_node(g, "late", ["a"])]) is None
    assert backend.get_job(g.ids["late"]) is None
    after = backend.get_batch(g.id)
    assert before is not None and after is not None and after.total == before.total == 1


def test_adding_the_same_node_again_stores_and_links_it_once(backend: Backend) -> None:
    g = Graph(backend, {"a": []})
    job = _lease(backend, g, "a")
    child = _node(g, "b", ["a"])
    first = backend.add_nodes(job.id, job.token, [child])
    again = backend.add_nodes(job.id, job.token, [child])
    assert first is not None and again is not None
    assert [r.created for r in first] == [True] and [r.created for r in again] == [False]
    assert ack(backend, job, Outcome.SUCCEEDED)
    assert g.state("b") is JobState.PENDING
    assert kinds_of(backend, g.ids["b"]).count(EventKind.RELEASED) == 1
    status = backend.get_batch(g.id)
    assert status is not None and status.total == 2


def test_a_retried_node_re_adds_under_the_same_ids(backend: Backend) -> None:
    g = Graph(backend, {"a": []})
    first = _lease(backend, g, "a")
    child = _node(g, "b", ["a"])
    assert backend.add_nodes(first.id, first.token, [child]) is not None
    assert ack(backend, first, Outcome.RETRY, retry_in=0.0, error=boom("flaky"))
    backend.promote_due()
    second = _lease(backend, g, "a")
    again = backend.add_nodes(second.id, second.token, [child])
    assert again is not None and not again[0].created
    assert g.state("b") is JobState.WAITING
    assert ack(backend, second, Outcome.SUCCEEDED)
    assert g.state("b") is JobState.PENDING
    status = backend.get_batch(g.id)
    assert status is not None and status.total == 2


def test_parents_must_be_nodes_of_the_same_workflow(backend: Backend) -> None:
    g = Graph(backend, {"a": []})
    other = Graph(backend, {"x": []})
    job = _lease(backend, g, "a")
    for parents in (["nowhere"], [other.ids["x"]]):
        with pytest.raises(WorkflowError, match="not a node of workflow"):
            backend.add_nodes(job.id, job.token, [_node(g, "b", parents)])
        assert backend.get_job(g.ids["b"]) is None
    status = backend.get_batch(g.id)
    assert status is not None and status.total == 1
    loose = spec("wf", job_id=new_job_id("loose"))
    backend.enqueue([loose])
    leased = [j for j in take(backend, ["wf"], count=10) if j.id == loose.id]
    with pytest.raises(WorkflowError, match="not a node of a workflow"):
        backend.add_nodes(loose.id, leased[0].token, [_node(g, "c", [])])


def test_the_workflow_completes_only_after_the_added_nodes(backend: Backend) -> None:
    g = Graph(backend, {"a": []})
    job = _lease(backend, g, "a")
    assert backend.add_nodes(job.id, job.token, [_node(g, "b", []), _node(g, "c", ["b"])])
    assert ack(backend, job, Outcome.SUCCEEDED)
    status = backend.get_batch(g.id)
    assert status is not None and not status.complete
    g.run("b")
    g.run("c")
    status = backend.get_batch(g.id)
    assert status is not None and status.complete and status.total == 3
    assert state_of(backend, g.ids["c"]) is JobState.SUCCEEDED


def test_the_graph_is_read_with_states_and_parents(backend: Backend) -> None:
    g = Graph(backend, {"a": [], "b": ["a"], "c": ["a", "b"]})
    g.run("a")
    job = _lease(backend, g, "b")
    assert backend.add_nodes(job.id, job.token, [_node(g, "d", ["b", "c"])])
    nodes = {n.id: n for n in backend.workflow_graph(g.id)}
    assert {n.name for n in nodes.values()} == {"step.a", "step.b", "step.c", "step.d"}
    assert nodes[g.ids["c"]].parents == (g.ids["a"], g.ids["b"])
    assert nodes[g.ids["d"]].parents == (g.ids["b"], g.ids["c"])
    assert [nodes[g.ids[n]].state for n in "abcd"] == [
        JobState.SUCCEEDED, JobState.ACTIVE, JobState.WAITING, JobState.WAITING]
    assert len(backend.workflow_graph(g.id, limit=2)) == 2
    assert backend.workflow_graph("no-such-workflow") == []
    plain = new_job_id("plain")
    backend.create_batch(BatchSpec(plain))
    backend.enqueue([spec("wf", batch_id=plain)])
    assert backend.workflow_graph(plain) == []  # a batch is not a graph


def test_an_added_node_whose_id_is_another_jobs_is_refused(backend: Backend) -> None:
    """Issue 49: a node added at run time under the id of a stored job that is no node of the
    workflow was left out, the job kept as it was, and the new node's children waited for it
    for good; refused on SQLite and PostgreSQL by accident, accepted on Redis (a job of
    another queue lives in another slot). Now refused on every store, nothing stored."""
    g = Graph(backend, {"a": []})
    other = Graph(backend, {"x": []})
    job = _lease(backend, g, "a")
    plain_default, plain_other = put(backend), put(backend, "other")
    for taken in (plain_default, plain_other, other.ids["x"]):
        child = _node(g, "b", ["a"])
        spec_ = JobSpec(id=taken, name=child.name, queue=child.queue, payload=child.payload,
                        batch_id=g.id, node=child.node)
        with pytest.raises(WorkflowError, match="a node id must be new") as info:
            backend.add_nodes(job.id, job.token, [_node(g, "c", ["a"]), spec_])
        assert "\n" not in str(info.value)
        assert backend.get_job(g.ids["c"]) is None  # nothing of the call is stored
    assert state_of(backend, plain_other) is JobState.PENDING
    record = backend.get_job(plain_default)
    assert record is not None and record.batch_id is None
    status = backend.get_batch(g.id)
    assert status is not None and status.total == 1
    # the node's own id, added again (a retried job re-adds its nodes), is still left as is
    child = _node(g, "d", ["a"])
    assert backend.add_nodes(job.id, job.token, [child]) is not None
    again = backend.add_nodes(job.id, job.token, [child])
    assert again is not None and not again[0].created
