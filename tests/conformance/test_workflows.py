"""Workflows: nodes wait for their parents, and settle by policy in the parent's own step.

Every backend stores a node with parents ``waiting``; a parent's terminal move settles its
children exactly once (a late ack of a stale lease releases nothing), a retry by hand re-opens
what the graph ended, and the workflow's counters are a batch's (docs/workflows.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, BatchSpec, EventKind, JobState, Node, Outcome
from conveyor.storage import Backend
from tests.conformance.helpers import ack, boom, kinds_of, new_job_id, spec, state_of, take


class Graph:
    """A workflow stored on ``backend``: ``edges`` maps each node name to its parents."""

    def __init__(self, backend: Backend, edges: Mapping[str, Sequence[str]], *,
                 policy: Mapping[str, str] | None = None, results: Sequence[str] = (),
                 queue: str = "wf") -> None:
        self.backend = backend
        self.id = new_job_id("w")
        self.ids = {name: new_job_id(name) for name in edges}
        self.names = {job_id: name for name, job_id in self.ids.items()}
        children: dict[str, list[str]] = {name: [] for name in edges}
        for name, parents in edges.items():
            for parent in parents:
                children[parent].append(name)
        backend.create_batch(BatchSpec(self.id, description="test graph", kind="workflow"))
        specs = []
        for name, parents in edges.items():
            node = Node(tuple(self.ids[p] for p in parents),
                        tuple(self.ids[c] for c in children[name]),
                        (policy or {}).get(name, "fail"), "list" if name in results else "")
            specs.append(spec(queue, name=f"step.{name}", args=[name], job_id=self.ids[name],
                              batch_id=self.id, node=node))
        specs.sort(key=lambda s: not (s.node and s.node.parents))  # waiting nodes first
        assert all(r.created for r in backend.enqueue(specs))
        backend.close_batch(self.id)

    def state(self, name: str) -> JobState:
        return state_of(self.backend, self.ids[name])

    def states(self) -> dict[str, str]:
        return {name: self.state(name).value for name in self.ids}

    def run(self, name: str, outcome: Outcome = Outcome.SUCCEEDED, **kwargs: object) -> None:
        """Lease exactly the named node (it must be pending) and acknowledge it."""
        leased = take(self.backend, ["wf"], count=100)
        assert self.ids[name] in [j.id for j in leased], f"{name} was not pending"
        for job in leased:
            if job.id == self.ids[name]:
                assert ack(self.backend, job, outcome, **kwargs)  # type: ignore[arg-type]
            else:
                assert ack(self.backend, job, Outcome.INTERRUPTED)

    def message(self, name: str) -> str | None:
        record = self.backend.get_job(self.ids[name])
        assert record is not None
        return record.message


def _succeed(result: object) -> dict[str, object]:
    return {"result": json.dumps(result)}


def test_a_node_waits_for_every_parent_and_receives_their_results(backend: Backend) -> None:
    g = Graph(backend, {"a": [], "b": [], "c": ["a", "b"]}, results=["c"])
    assert g.states() == {"a": "pending", "b": "pending", "c": "waiting"}
    assert [r.id for r in backend.list_jobs(state=JobState.WAITING)] == [g.ids["c"]]
    assert backend.count_jobs(state=JobState.WAITING) == 1
    assert {q.name: q.waiting for q in backend.queues()}["wf"] == 1
    g.run("b", **_succeed({"rows": 2}))
    assert g.state("c") is JobState.WAITING
    g.run("a", **_succeed([1]))
    assert g.state("c") is JobState.PENDING
    record = backend.get_job(g.ids["c"])
    assert record is not None
    # In the order of the node's parents, not of their endings.
    assert record.args == [[[1], {"rows": 2}], "c"]
    assert kinds_of(backend, g.ids["c"]) == [EventKind.ENQUEUED, EventKind.RELEASED]
    status = backend.get_batch(g.id)
    assert status is not None and status.kind == "workflow"
    assert status.counts["pending"] == 1 and status.counts["succeeded"] == 2
    g.run("c")
    status = backend.get_batch(g.id)
    assert status is not None and status.complete


def test_each_policy_when_a_parent_fails(backend: Backend) -> None:
    g = Graph(backend, {"p": [], "ok": [], "fail": ["p"], "cont": ["p", "ok"],
                        "ign": ["p", "ok"], "skip": ["p"], "after_skip": ["skip"],
                        "after_fail": ["fail"]},
              policy={"cont": "continue", "ign": "ignore", "skip": "skip",
                      "after_skip": "continue", "after_fail": "continue"},
              results=["cont", "ign"])
    g.run("ok", **_succeed("fine"))
    g.run("p", Outcome.DEAD, error=boom("disk full"))
    states = g.states()
    assert states == {"p": "dead", "ok": "succeeded", "fail": "failed", "cont": "pending",
                      "ign": "pending", "skip": "cancelled", "after_skip": "cancelled",
                      "after_fail": "pending"}
    assert g.message("fail") == f"parent step.p {g.ids['p']} ended dead: disk full"
    assert g.message("skip") == f"skipped: parent step.p {g.ids['p']} ended dead"
    assert g.message("after_skip") == f"skipped: parent step.skip {g.ids['skip']} was skipped"
    cont, ign = backend.get_job(g.ids["cont"]), backend.get_job(g.ids["ign"])
    assert cont is not None and cont.args[0] == [None, "fine"]
    assert ign is not None and ign.args[0] == ["fine"]


def test_a_stale_ack_releases_nothing_twice(backend: Backend, clock: FakeClock) -> None:
    g = Graph(backend, {"p": [], "c": ["p"]})
    [stale] = take(backend, ["wf"], lease=10)
    clock.advance(11)
    assert backend.reclaim_expired() == 1
    [fresh] = take(backend, ["wf"], worker="w2", lease=10)
    assert ack(backend, fresh, Outcome.SUCCEEDED)
    assert g.state("c") is JobState.PENDING
    assert not ack(backend, stale, Outcome.DEAD, error=boom())  # fenced: refused
    assert g.state("c") is JobState.PENDING
    assert kinds_of(backend, g.ids["c"]).count(EventKind.RELEASED) == 1


def test_a_retry_by_hand_reopens_what_the_graph_ended(backend: Backend) -> None:
    g = Graph(backend, {"p": [], "c": ["p"], "s": ["p"], "gc": ["c", "s"]},
              policy={"s": "skip", "gc": "continue"})
    g.run("p", Outcome.FAILED, message="bad row")
    assert g.states() == {"p": "failed", "c": "failed", "s": "cancelled", "gc": "cancelled"}
    status = backend.get_batch(g.id)
    assert status is not None and status.complete
    assert backend.retry_jobs([g.ids["p"]]) == 1
    assert g.states() == {"p": "pending", "c": "waiting", "s": "waiting", "gc": "waiting"}
    assert EventKind.REOPENED in kinds_of(backend, g.ids["gc"])
    status = backend.get_batch(g.id)
    assert status is not None and not status.complete and status.counts["waiting"] == 3
    g.run("p")
    assert g.states() == {"p": "succeeded", "c": "pending", "s": "pending", "gc": "waiting"}
    g.run("c")
    g.run("s")
    assert g.state("gc") is JobState.PENDING


def test_recovered_to_dead_killed_deleted_and_cancelled_parents_settle(
        backend: Backend, clock: FakeClock) -> None:
    g = Graph(backend, {"lost": [], "killed": ["lost"], "k1": ["killed"]},
              policy={"k1": "continue"})
    for _ in range(2):  # the lease runs out twice: recovered, then dead
        take(backend, ["wf"], count=10, lease=5)
        clock.advance(6)
        backend.reclaim_expired(max_recoveries=1)
    assert g.state("lost") is JobState.DEAD
    assert g.state("killed") is JobState.FAILED  # its parent died: policy "fail"
    assert g.state("k1") is JobState.PENDING  # continue
    g = Graph(backend, {"gone": [], "g1": ["gone"], "cancelled": [], "c1": ["cancelled"]},
              policy={"g1": "skip", "c1": "fail"})
    assert backend.delete_jobs([g.ids["gone"]]) == 1
    assert g.state("g1") is JobState.CANCELLED
    assert backend.cancel(g.ids["cancelled"]) is JobState.CANCELLED
    assert g.state("c1") is JobState.FAILED
    assert g.message("c1") == (f"parent step.cancelled {g.ids['cancelled']} ended cancelled: "
                               "cancelled while waiting")


def test_a_waiting_node_killed_by_hand_settles_its_children(backend: Backend) -> None:
    g = Graph(backend, {"p": [], "w": ["p"], "c": ["w"]}, policy={"c": "continue"})
    assert backend.kill_jobs([g.ids["w"]]) == 1
    assert g.state("w") is JobState.DEAD
    assert g.state("c") is JobState.PENDING


def test_cancelling_a_workflow_cancels_its_waiting_nodes(backend: Backend) -> None:
    g = Graph(backend, {"a": [], "b": [], "c": ["a", "b"], "d": ["c"]},
              policy={"d": "continue"})
    [running] = take(backend, ["wf"])
    assert backend.cancel_batch(g.id) == 4
    assert g.state("c") is JobState.CANCELLED and g.state("d") is JobState.CANCELLED
    assert ack(backend, running, Outcome.CANCELLED)
    status = backend.get_batch(g.id)
    assert status is not None and status.complete and status.cancelled
    assert status.counts["cancelled"] == 4


def test_workflows_are_listed_apart_from_batches(backend: Backend) -> None:
    g = Graph(backend, {"a": []})
    backend.create_batch(BatchSpec(new_job_id("b")))
    assert [b.id for b in backend.list_batches(kind="workflow")] == [g.id]
    assert g.id not in [b.id for b in backend.list_batches(kind="batch")]
    assert len(backend.list_batches()) == 2


def test_a_fan_in_of_many_parents_releases_its_child_once(backend: Backend) -> None:
    parents = {f"p{i}": [] for i in range(60)}
    g = Graph(backend, {**parents, "join": list(parents)}, results=["join"])
    leased = take(backend, ["wf"], count=100)
    assert len(leased) == 60
    for i, job in enumerate(leased):
        assert backend.ack([Ack(job.id, job.token, Outcome.SUCCEEDED, result=str(i))]) == [True]
    assert g.state("join") is JobState.PENDING
    record = backend.get_job(g.ids["join"])
    assert record is not None and sorted(record.args[0]) == list(range(60))
    assert kinds_of(backend, g.ids["join"]).count(EventKind.RELEASED) == 1
