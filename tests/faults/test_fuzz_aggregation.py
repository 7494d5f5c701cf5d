"""Random aggregation traffic on every backend, step by step beside the memory store.

``GroupMachine`` enqueues members of two keys with random ``max_size``, moves the clock,
promotes (which joins due retries and flushes due groups), leases every pending job and
gathers each lead's group, acknowledges members with random outcomes, cancels members and lets
leases expire. The same steps run on the store under test and on a ``memory://`` store (the
reference: storage/aggregation.py's steps as written); after every step each job's state,
and each gather's members, must be the same on both. Invariants that hold on any correct
store are checked too: a gather takes only members of the lead's group, at most
``max_size - 1``, under the lead's token; no member is leased twice at once.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, ErrorInfo, FlowControl, JobState, LeasedJob, Outcome
from conveyor.storage import Backend, open_storage
from tests.conformance.backends import BACKENDS, backend_url, open_backend
from tests.conformance.helpers import spec
from tests.faults.fuzzing import run_machine

QUEUE = "agg"
LEASE = 20.0
EXAMPLES = {"sqlite": 40, "postgres": 15, "redis": 25, "redis_cluster": 10}
SCALE = int(os.environ.get("FUZZ_SCALE", "1"))
FUZZED = tuple(name for name in BACKENDS if name not in ("memory", "redis_sentinel"))
BOOM = ErrorInfo("RuntimeError", "boom")


class GroupMachine(RuleBasedStateMachine):
    """One store under test and the memory reference, driven alike."""

    open_store: ClassVar[Callable[[FakeClock], Backend]]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = type(self).open_store(self.clock)
        self.ref = open_storage("memory://", self.clock)
        self.ids: list[str] = []
        self.keys: dict[str, tuple[str, int]] = {}  # id -> (key, max_size)
        # job id -> (its lease on the store, its lease on the reference)
        self.held: dict[str, tuple[LeasedJob, LeasedJob]] = {}

    def teardown(self) -> None:
        self.store.close()

    def both(self, call: Callable[[Backend], Any]) -> tuple[Any, Any]:
        return call(self.store), call(self.ref)

    @rule(key=st.sampled_from(["a", "b"]), max_size=st.sampled_from([1, 2, 3, 5]),
          n=st.integers(1, 4))
    def enqueue(self, key: str, max_size: int, n: int) -> None:
        flow = FlowControl(group_key=key, grace=2.0, max_delay=6.0, max_size=max_size)
        specs = [spec(QUEUE, name="fuzz.member", job_id=f"m{len(self.ids) + i:04d}",
                      flow=flow, max_retries=2) for i in range(n)]
        got, want = self.both(lambda s: s.enqueue(specs))
        assert got == want
        self.ids += [s.id for s in specs]
        self.keys.update({s.id: (key, max_size) for s in specs})

    @rule(seconds=st.sampled_from([0.5, 1.5, 2.5, 4.0]))
    def advance_and_promote(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.both(lambda s: s.promote_due())

    @rule()
    def lease_and_gather(self) -> None:
        leads, ref_leads = self.both(lambda s: s.dequeue([QUEUE], "fuzz", 50, LEASE))
        assert sorted(j.id for j in leads) == sorted(j.id for j in ref_leads)
        mine = {j.id: j for j in ref_leads}
        for lead in sorted(leads, key=lambda j: j.id):  # the same order on both stores
            ref_lead = mine[lead.id]
            gathered = self.store.gather(lead.id, lead.token)
            expected = self.ref.gather(ref_lead.id, ref_lead.token)
            assert gathered is not None and expected is not None
            assert [m.id for m in gathered] == [m.id for m in expected], lead.id
            assert all(m.token == lead.token for m in gathered)
            key = self.keys[lead.id][0]
            # a group runs by its newest member's settings: at most the largest max_size
            largest = max(size for k, size in self.keys.values() if k == key)
            assert len(gathered) <= largest - 1
            assert all(self.keys[m.id][0] == key for m in gathered)
            for job in (lead, *gathered):
                assert job.id not in self.held, f"{job.id} leased twice"
            self.held[lead.id] = (lead, ref_lead)
            for member, ref_member in zip(gathered, expected, strict=True):
                self.held[member.id] = (member, ref_member)

    @rule(data=st.data())
    def ack_some(self, data: st.DataObject) -> None:
        if not self.held:
            return
        chosen = data.draw(st.lists(st.sampled_from(sorted(self.held)), min_size=1,
                                    max_size=6, unique=True))
        outcome = data.draw(st.sampled_from([Outcome.SUCCEEDED, Outcome.RETRY, Outcome.FAILED]))
        extra: dict[str, Any] = ({"error": BOOM, "retry_in": 2.0} if outcome is Outcome.RETRY
                                 else {"message": "no"} if outcome is Outcome.FAILED else {})
        for side in (0, 1):
            acks = [Ack(self.held[i][side].id, self.held[i][side].token, outcome, **extra)
                    for i in chosen]
            applied = (self.store if side == 0 else self.ref).ack(acks)
            assert all(applied), (side, chosen)
        for job_id in chosen:
            del self.held[job_id]

    @rule(data=st.data())
    def cancel_one(self, data: st.DataObject) -> None:
        if not self.ids:
            return
        job_id = data.draw(st.sampled_from(self.ids))
        got, want = self.both(lambda s: s.cancel(job_id))
        assert got == want, job_id

    @rule()
    def leases_expire(self) -> None:
        self.clock.advance(LEASE + 1)
        self.both(lambda s: s.reclaim_expired())
        self.held.clear()

    @invariant()
    def every_job_is_where_the_reference_has_it(self) -> None:
        for job_id in self.ids:
            got, want = self.store.get_job(job_id), self.ref.get_job(job_id)
            assert got is not None and want is not None, job_id
            assert got.state is want.state, (job_id, got.state, want.state)
            assert (got.attempt, got.errors) == (want.attempt, want.errors), job_id
        counts = self.both(lambda s: s.count_jobs(state=JobState.AGGREGATING, queue=QUEUE))
        assert counts[0] == counts[1]


@pytest.mark.parametrize("name", FUZZED)
def test_aggregation_beside_the_reference(name: str, request: pytest.FixtureRequest,
                                          tmp_path: Path) -> None:
    run_machine(GroupMachine, name, request, tmp_path, EXAMPLES[name] * SCALE, steps=30)


class _Draws:
    """``st.data()`` for a replayed step: hands out the values it was given, in order."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: object, label: object = None) -> Any:
        return self.values.pop(0)


@pytest.mark.parametrize("name", FUZZED)
def test_retried_members_join_their_group_in_enqueue_order(
        name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A case the fuzzer found (on PostgreSQL, 2026-11-27): members of one key retried in
    one ack come due at the same moment and join their group in one promote. The group takes
    the settings of the member that joins last, so the order of members due at the same time
    must be the reference's — enqueue order — not the order their rows lie in the table.
    PostgreSQL ordered them by ``run_at`` alone, the lead gathered 4 members by a
    ``max_size`` of 5 where the reference gathered 2 by the newest member's 3."""
    def open_store(clock: FakeClock) -> Backend:
        where = tmp_path / uuid.uuid4().hex[:8]
        where.mkdir()
        return open_backend(name, backend_url(name, where, request.getfixturevalue), clock)

    machine: Any = type("Replay", (GroupMachine,), {"open_store": staticmethod(open_store)})()
    try:
        machine.enqueue("a", 2, 1)
        machine.enqueue("b", 5, 1)
        machine.enqueue("b", 5, 4)
        machine.enqueue("b", 3, 4)
        machine.lease_and_gather()
        machine.lease_and_gather()
        machine.leases_expire()
        machine.enqueue("a", 1, 1)
        machine.enqueue("a", 1, 4)
        machine.lease_and_gather()
        machine.ack_some(_Draws(["m0001", "m0003"], Outcome.SUCCEEDED))
        machine.ack_some(_Draws(["m0002", "m0004", "m0005", "m0006", "m0007", "m0014"],
                                Outcome.RETRY))
        machine.every_job_is_where_the_reference_has_it()
        machine.advance_and_promote(0.5)
        machine.advance_and_promote(1.5)
        machine.every_job_is_where_the_reference_has_it()
        machine.lease_and_gather()
        machine.every_job_is_where_the_reference_has_it()
    finally:
        machine.teardown()
