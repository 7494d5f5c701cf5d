"""Why a job waits, the same on every store (docs/scheduling.md, client/explain.py): a job is
put behind each gate, the explanation names the gate and its holder or its time, the gate is
released, and the job runs. The facts come from ``Inspector.gate_facts``, which each store
reads from the state its own fetch decides by; no peer explains this (issue 54), so these
tests pin our own promise, gate by gate."""

from __future__ import annotations

from typing import cast

from conveyor.client.explain import Explanation, Reason, explain
from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, FlowControl, JobState, Node, Outcome
from conveyor.storage import Backend
from conveyor.storage.outbox import Arrival, Outbox, StartKind
from tests.conformance.helpers import (
    ack,
    boom,
    new_job_id,
    put,
    spec,
    state_of,
    take,
    take_one,
    worker_info,
)


def _live(backend: Backend, clock: FakeClock, queues: tuple[str, ...] = ("default",)) -> None:
    """A live worker serving ``queues`` (five slots), as its heartbeat registers it."""
    backend.heartbeat(worker_info(clock, "live-worker", queues), {}, 30.0)


def _why(backend: Backend, job_id: str, broker: bool = False) -> Explanation:
    found = explain(backend, job_id, broker=broker)
    assert found is not None
    return found


def _gate(backend: Backend, job_id: str, gate: str, broker: bool = False) -> Reason:
    """The reason ``gate`` gives for ``job_id`` (it must give one)."""
    found = _why(backend, job_id, broker)
    reasons = {r.gate: r for r in found.reasons}
    assert gate in reasons, f"{gate!r} not among {found.lines()}"
    return reasons[gate]


def _runs(backend: Backend, job_id: str, queue: str = "default") -> None:
    """The gate released, the job is what the next fetch leases."""
    assert job_id in [j.id for j in take(backend, [queue], count=10)]


def test_a_job_nothing_holds_back_is_ready(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    job_id = put(backend)
    found = _why(backend, job_id)
    assert (found.status, found.reasons) == ("ready", ())
    assert found.lines()[0].startswith("ready: ")
    _runs(backend, job_id)
    assert _why(backend, job_id).status == "running"


def test_no_live_worker_serves_the_queue(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend, "lonely")
    assert "'lonely'" in _gate(backend, job_id, "no_worker").text
    _live(backend, clock, ("lonely",))
    assert "no_worker" not in {r.gate for r in _why(backend, job_id).reasons}
    _runs(backend, job_id, "lonely")


def test_paused_queue(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    job_id = put(backend)
    backend.pause_queue("default")
    assert "queue 'default' is paused" in _gate(backend, job_id, "paused").text
    backend.resume_queue("default")
    assert _why(backend, job_id).status == "ready"
    _runs(backend, job_id)


def test_scheduled_time(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    at = clock.now() + 60
    job_id = put(backend, run_at=at)
    reason = _gate(backend, job_id, "scheduled")
    assert reason.until == at and "scheduled for" in reason.text
    clock.advance(61)
    backend.promote_due()
    _runs(backend, job_id)


def test_a_suspended_durable_job_names_what_it_waits_for(backend: Backend,
                                                          clock: FakeClock) -> None:
    """A durable job that sleeps or waits is ``scheduled``; "scheduled for T" hid why. As
    Temporal's and DBOS's consoles show a workflow's pending timer or signal, explain says
    what the job's own code is waiting for (the worker's words in its suspension) and when it
    runs at the latest."""
    _live(backend, clock)
    job_id = put(backend)
    until = clock.now() + 3600
    waiting = "waiting for event 'paid' key 'order-7' until 01:00:00 UTC"
    assert ack(backend, take_one(backend), Outcome.SUSPENDED, resume_at=until,
               message=waiting)
    reason = _gate(backend, job_id, "durable")
    assert reason.until == until
    assert reason.text == f"durable job {waiting}"
    assert "scheduled" not in {r.gate for r in _why(backend, job_id).reasons}


def test_retrying_time(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    job_id = put(backend)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom("no route"), retry_in=30)
    reason = _gate(backend, job_id, "retrying")
    assert reason.until == clock.now() + 30 and "no route" in reason.text
    clock.advance(31)
    backend.promote_due()
    _runs(backend, job_id)


def test_concurrency_key_names_its_holders(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    flow = FlowControl(concurrency_key="acct:42", concurrency_limit=2)
    holders = [put(backend, flow=flow) for _ in range(2)]
    waiting = put(backend, flow=flow)
    running = take(backend, count=3)
    assert [j.id for j in running] == holders
    reason = _gate(backend, waiting, "concurrency")
    assert set(reason.holders) == set(holders)
    assert "'acct:42' at 2/2" in reason.text and holders[0] in reason.text
    assert ack(backend, running[0])
    _runs(backend, waiting)


def test_rate_window_says_when_the_next_start_may_come(backend: Backend,
                                                      clock: FakeClock) -> None:
    _live(backend, clock)
    flow = FlowControl(rate_key="smtp", rate_limit=1, rate_period=10.0)
    put(backend, flow=flow)
    waiting = put(backend, flow=flow)
    started = clock.now()
    assert len(take(backend, count=5)) == 1
    reason = _gate(backend, waiting, "rate")
    assert reason.until == started + 10 and "(1 of 1 in the window)" in reason.text
    clock.advance(10)
    _runs(backend, waiting)


def test_ordered_key_names_its_holder(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    flow = FlowControl(order_key="ledger:7")
    first = put(backend, flow=flow)
    second = put(backend, flow=flow)
    assert ack(backend, take_one(backend), Outcome.RETRY, error=boom(), retry_in=60)
    reason = _gate(backend, second, "order")
    assert reason.holders == (first,) and "retrying" in reason.text
    assert backend.cancel(first) is JobState.CANCELLED
    _runs(backend, second)


def test_debounce_and_throttle_windows(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    at = clock.now() + 5
    bounce = put(backend, run_at=at, flow=FlowControl(fold_key="doc:1", fold="debounce"))
    steady = put(backend, run_at=at, flow=FlowControl(fold_key="digest", fold="throttle"))
    reason = _gate(backend, bounce, "debounce")
    assert reason.until == at and "'doc:1'" in reason.text
    assert _gate(backend, steady, "throttle").until == at
    clock.advance(6)
    backend.promote_due()
    assert {j.id for j in take(backend, count=5)} == {bounce, steady}


def test_aggregation_window(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock, ("agg",))
    flow = FlowControl(group_key="user:5", grace=5.0, max_delay=60.0, max_size=100)
    members = [backend.enqueue([spec("agg", flow=flow)])[0].id for _ in range(2)]
    reason = _gate(backend, members[1], "aggregation")
    assert "'user:5'" in reason.text and reason.until == clock.now() + 5
    clock.advance(6)
    backend.promote_due()
    lead = take_one(backend, ["agg"])
    assert lead.id == members[0]
    gathered = backend.gather(lead.id, lead.token)
    assert gathered is not None and [m.id for m in gathered] == members[1:]


def test_workflow_parents(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    workflow = new_job_id("w")
    parent, child = new_job_id("p"), new_job_id("c")
    backend.create_batch(BatchSpec(workflow, kind="workflow"))
    assert all(r.created for r in backend.enqueue([
        spec(job_id=child, batch_id=workflow, node=Node((parent,), ())),
        spec(job_id=parent, batch_id=workflow, node=Node((), (child,)))]))
    reason = _gate(backend, child, "parents")
    assert reason.holders == (parent,)
    assert ack(backend, take_one(backend))
    _runs(backend, child)


def test_a_running_job_names_its_lease(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend, worker="w-lease")
    found = _why(backend, job_id)
    assert found.status == "running"
    assert found.reasons[0].gate == "lease" and "w-lease" in found.reasons[0].text
    assert found.reasons[0].until == clock.now() + 30
    assert ack(backend, job)
    assert _why(backend, job_id).status == "finished"


def test_jobs_of_higher_priority_ahead(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    ahead = [put(backend, flow=FlowControl(priority=5)) for _ in range(2)]
    low = put(backend)
    assert _gate(backend, low, "priority").text.startswith("2 job(s) of higher priority")
    assert [j.id for j in take(backend, count=2)] == ahead
    assert _why(backend, low).status == "ready"
    _runs(backend, low)


def test_fair_share_names_the_keys_served_first(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    for key in ("a", "b", "c"):
        put(backend, flow=FlowControl(fair_key=key))
    mine = put(backend, flow=FlowControl(fair_key="d"))
    reason = _gate(backend, mine, "fair_share")
    assert reason.text == "fair share: key 'd' served after keys 'a', 'b', 'c'"
    assert len(take(backend, count=3)) == 3
    _runs(backend, mine)


def test_jobs_ahead_in_arrival_order(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    first = [put(backend) for _ in range(3)]
    last = put(backend)
    assert _gate(backend, last, "arrival").text.startswith("3 job(s) in queue 'default'")
    assert [j.id for j in take(backend, count=3)] == first
    _runs(backend, last)


def test_a_job_costlier_than_every_live_worker(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)  # five slots
    job_id = put(backend, flow=FlowControl(cost=8))
    assert "costs 8 slots" in _gate(backend, job_id, "cost").text
    assert backend.dequeue(["default"], "small", 5, 30.0, 5) == []
    assert [j.id for j in backend.dequeue(["default"], "big", 8, 30.0, 8)] == [job_id]


def test_a_job_in_the_broker_not_yet_delivered(backend: Backend, clock: FakeClock) -> None:
    _live(backend, clock)
    job_id = put(backend)
    outbox = cast(Outbox, backend)
    assert "relay" in _gate(backend, job_id, "broker", broker=True).text
    assert outbox.publish_due("default", 10, 30.0) == [job_id]
    reason = _gate(backend, job_id, "broker", broker=True)
    assert reason.text == "in the broker, not yet delivered to a worker"
    [reply] = outbox.start("default", [Arrival(job_id, False, None)], "w1", 30.0)
    assert reply.kind is StartKind.STARTED
    assert state_of(backend, job_id) is JobState.ACTIVE
