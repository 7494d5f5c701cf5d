"""Random operations on a random workflow, against every backend, checked after each step.

``GraphMachine`` stores a random graph (5-8 nodes, each after 0-3 earlier ones, each with a
random ``on_parent_failure``), then runs leases, every acknowledgement, stale ones, lease
expiry with recovery to dead, cancel, kill, retry by hand, promotion, and nodes added by a
running node (after any nodes, settled or not; and refused on a stale lease) in random order.
After every step the graph must be settled as docs/workflows.md says, read black-box:

- no node waits when every parent has settled (nothing is stuck);
- a node the graph ended names a parent that did not succeed (or was skipped), and a node
  ended by ``fail`` or ``skip`` had such a parent under that policy;
- a node is released at most once per time it was re-opened or retried back to waiting, and
  a node under ``fail`` or ``skip`` is never released on a parent that did not succeed;
- a node with parents is pending, running or finished only after the graph released it (a
  retry by hand never runs it without its parents' outcome: issue 51);
- the workflow's counters equal the nodes' states.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from conveyor.core.clock import FakeClock
from conveyor.core.job import (
    TERMINAL_STATES,
    Ack,
    BatchSpec,
    ErrorInfo,
    EventKind,
    JobRecord,
    JobState,
    Node,
    Outcome,
)
from conveyor.core.node import PARENT_FAILURE_POLICIES
from conveyor.storage import Backend
from tests.conformance.backends import BACKENDS
from tests.conformance.helpers import spec
from tests.faults.fuzzing import run_machine

LEASE = 30.0
QUEUE = "wf"
EXAMPLES = {"memory": 60, "sqlite": 25, "postgres": 15, "redis": 15, "redis_cluster": 8}
SCALE = int(os.environ.get("FUZZ_SCALE", "1"))  # FUZZ_SCALE=20: a longer local hunt
FUZZED = tuple(name for name in BACKENDS if name != "redis_sentinel")
FAILED = frozenset({JobState.FAILED, JobState.DEAD, JobState.CANCELLED})
OUTCOMES = [Outcome.SUCCEEDED, Outcome.SUCCEEDED, Outcome.FAILED, Outcome.DEAD, Outcome.RETRY,
            Outcome.INTERRUPTED]
BOOM = ErrorInfo("ValueError", "boom")

GRAPH = st.integers(5, 8).flatmap(lambda n: st.tuples(*(
    st.tuples(st.lists(st.integers(0, max(i - 1, 0)), max_size=min(i, 3), unique=True),
              st.sampled_from(PARENT_FAILURE_POLICIES))
    for i in range(n))))


class GraphMachine(RuleBasedStateMachine):
    """One workflow on one store; ``open_store`` is set per backend by the test below."""

    open_store: ClassVar[Callable[[FakeClock], Backend]]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = type(self).open_store(self.clock)
        self.workflow = "workflow"
        self.ids: list[str] = []
        self.parents: dict[str, tuple[str, ...]] = {}
        self.policy: dict[str, str] = {}
        self.leases: dict[str, str] = {}  # job id -> token held
        # (job id, old token, the outcome applied with it; None when the lease was reclaimed)
        self.stale: list[tuple[str, str, Outcome | None]] = []

    def teardown(self) -> None:
        self.store.close()

    @initialize(graph=GRAPH)
    def build(self, graph: tuple[tuple[list[int], str], ...]) -> None:
        # Ids fixed per example (each has a store of its own): a replay of a failing example
        # must meet the same hash and list orders, so that its draws are the same.
        self.ids = [f"node{i:02d}" for i in range(len(graph))]
        children: dict[str, list[str]] = {i: [] for i in self.ids}
        for i, (parents, policy) in enumerate(graph):
            node_id = self.ids[i]
            self.parents[node_id] = tuple(self.ids[p] for p in parents if p < i)
            self.policy[node_id] = policy
            for parent in self.parents[node_id]:
                children[parent].append(node_id)
        self.store.create_batch(BatchSpec(self.workflow, kind="workflow"))
        specs = [spec(QUEUE, job_id=i, batch_id=self.workflow,
                      node=Node(self.parents[i], tuple(children[i]), self.policy[i]))
                 for i in self.ids]
        specs.sort(key=lambda s: not (s.node and s.node.parents))
        assert all(r.created for r in self.store.enqueue(specs))
        self.store.close_batch(self.workflow)

    @rule(count=st.integers(1, 4))
    def lease(self, count: int) -> None:
        for job in self.store.dequeue([QUEUE], "fuzz", count, LEASE):
            self.leases[job.id] = job.token

    @rule(data=st.data(), outcome=st.sampled_from(OUTCOMES))
    def ack(self, data: st.DataObject, outcome: Outcome) -> None:
        if not self.leases:
            return
        job_id = data.draw(st.sampled_from(sorted(self.leases)))
        token = self.leases.pop(job_id)
        error = BOOM if outcome in (Outcome.DEAD, Outcome.RETRY) else None
        assert self.store.ack([Ack(job_id, token, outcome, result="1", error=error,
                                   retry_in=0.0 if outcome is Outcome.RETRY else None)])[0]
        self.stale.append((job_id, token, outcome))

    @rule(data=st.data(), policy=st.sampled_from(PARENT_FAILURE_POLICIES))
    def grow(self, data: st.DataObject, policy: str) -> None:
        """A running node adds a node after 0-2 nodes of the workflow (settled or not)."""
        if not self.leases or len(self.ids) >= 16:
            return
        adder = data.draw(st.sampled_from(sorted(self.leases)))
        parents = tuple(data.draw(st.lists(st.sampled_from(self.ids), max_size=2, unique=True)))
        node_id = f"grow{len(self.ids):02d}"
        stored = self.store.add_nodes(adder, self.leases[adder], [spec(
            QUEUE, job_id=node_id, batch_id=self.workflow, node=Node(parents, (), policy))])
        assert stored is not None and stored[0].created, f"{adder} holds its lease"
        self.ids.append(node_id)
        self.parents[node_id], self.policy[node_id] = parents, policy

    @rule(data=st.data())
    def stale_grow(self, data: st.DataObject) -> None:
        """A node whose lease is gone adds nothing."""
        if self.stale:
            job_id, token, _ = data.draw(st.sampled_from(self.stale))
            if self.leases.get(job_id) == token:
                return
            late = spec(QUEUE, job_id="late", batch_id=self.workflow, node=Node((job_id,)))
            assert self.store.add_nodes(job_id, token, [late]) is None
            assert self.store.get_job("late") is None

    @rule(data=st.data())
    def stale_ack(self, data: st.DataObject) -> None:
        if self.stale:
            job_id, token, applied = data.draw(st.sampled_from(self.stale))
            # A replay of the outcome applied with this token may be answered True (a retried
            # call, on Redis); any other outcome on an old lease must be refused.
            outcome = Outcome.SUCCEEDED if applied is not Outcome.SUCCEEDED else Outcome.DEAD
            assert self.store.ack([Ack(job_id, token, outcome, error=BOOM)]) == [False]

    @rule()
    def expire_leases(self) -> None:
        self.clock.advance(LEASE + 1)
        self.store.reclaim_expired(max_recoveries=1)
        self.stale += [(job_id, token, None) for job_id, token in self.leases.items()]
        self.leases.clear()

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self.store.cancel(data.draw(st.sampled_from(self.ids)))

    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        self.store.kill_jobs([data.draw(st.sampled_from(self.ids))])

    @rule(data=st.data())
    def retry_by_hand(self, data: st.DataObject) -> None:
        self.store.retry_jobs([data.draw(st.sampled_from(self.ids))])

    @rule()
    def promote(self) -> None:
        self.clock.advance(1.0)
        self.store.promote_due()

    # -- what must hold after every step ------------------------------------------------------

    def _records(self) -> dict[str, JobRecord]:
        out: dict[str, JobRecord] = {}
        for job_id in self.ids:
            rec = self.store.get_job(job_id)
            assert rec is not None, f"node {job_id} is lost"
            out[job_id] = rec
        return out

    @invariant()
    def the_graph_is_settled_as_documented(self) -> None:
        if not self.ids:
            return
        recs = self._records()
        for job_id, rec in recs.items():
            parents = [recs[p] for p in self.parents[job_id]]
            settled = all(p.state in TERMINAL_STATES for p in parents)
            kinds = [e.kind for e in rec.events or []]
            if rec.state is JobState.WAITING:
                assert parents and not settled, f"{job_id} waits for settled parents"
            for event in rec.events or []:
                if event.kind == EventKind.RELEASED and self.policy[job_id] in ("fail", "skip"):
                    assert "did not succeed" not in (event.message or ""), (
                        f"{job_id} ({self.policy[job_id]}) released after a parent failed")
            releases = kinds.count(EventKind.RELEASED)
            rewaits = sum(e.kind == EventKind.RETRIED and e.state == JobState.WAITING.value
                          for e in rec.events or [])
            assert releases <= 1 + kinds.count(EventKind.REOPENED) + rewaits, (
                f"{job_id} released twice")
            if parents and rec.state in _RAN:
                assert releases, f"{job_id} is {rec.state.value} but was never released"
            message = rec.message or ""
            if message.startswith(("skipped: parent", "parent ")) and rec.state in FAILED:
                failed = [p for p in parents if p.state in FAILED]
                assert failed, f"{job_id} ended by its parents, none of which failed: {message}"
                if rec.state is JobState.FAILED:
                    assert self.policy[job_id] == "fail", (job_id, message)

    @invariant()
    def the_counters_are_the_nodes_states(self) -> None:
        if not self.ids:
            return
        status = self.store.get_batch(self.workflow)
        assert status is not None
        recs = self._records()
        for state in JobState:
            want = sum(r.state is state for r in recs.values())
            assert status.counts.get(state.value, 0) == want, (state, status.counts)


# States a job reaches only by being run (or released to run).
_RAN = frozenset({JobState.PENDING, JobState.ACTIVE, JobState.RETRYING, JobState.SUCCEEDED,
                  JobState.SCHEDULED})


@pytest.mark.parametrize("name", FUZZED)
def test_workflow_state_machine(name: str, request: pytest.FixtureRequest,
                                tmp_path: Path) -> None:
    run_machine(GraphMachine, name, request, tmp_path, EXAMPLES[name] * SCALE)
