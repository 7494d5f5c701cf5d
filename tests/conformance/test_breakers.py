"""Circuit breakers: the jobs of a key that keeps failing wait instead of spending their
attempts, then one probe decides — the same on every store (storage/breakers.py,
/work/notes/i56-breakers-spec.md).

The expectations come from the classic breaker (pybreaker, resilience4j: closed -> open after
N failures, open -> half-open after a wait, one trial call closes or reopens it), from
resilience4j's sliding time window (failures older than the window do not count), from
Sidekiq Enterprise's limiter (a job over a limit is rescheduled, not failed), from Oban's
snooze and BullMQ's ``RateLimitError`` / ``worker.rateLimit`` (the queue of a throttled
downstream waits, no attempt spent), and from Hatchet's per-key concurrency (one key waiting
never blocks the others).
"""

from __future__ import annotations

from typing import cast

from conveyor.client.explain import explain
from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, FlowControl, JobState, Outcome
from conveyor.storage import Backend
from conveyor.storage.outbox import Arrival, Outbox, StartKind
from conveyor.views.scaling import scale_hints
from tests.conformance.helpers import (
    ack,
    boom,
    connections,
    events_of,
    put,
    run_in_threads,
    state_of,
    take,
    take_one,
)


def _flow(key: str = "stripe", open_after: int = 3, within: float = 60.0,
          cool_down: float = 30.0) -> FlowControl:
    return FlowControl(breaker_key=key, breaker_open_after=open_after, breaker_within=within,
                       breaker_cool_down=cool_down)


def _fail(store: Backend, n: int, flow: FlowControl, queue: str = "default") -> list[str]:
    """``n`` jobs of ``flow`` leased one by one and acked as errors (retried)."""
    ids = []
    for _ in range(n):
        ids.append(put(store, queue, flow=flow))
        job = take_one(store, [queue])
        assert ack(store, job, Outcome.RETRY, error=boom("503"), retry_in=600.0)
    return ids


def _state(store: Backend, key: str = "stripe") -> str:
    found = [b for b in store.breakers() if b.key == key]
    return found[0].state if found else "closed"


def test_opens_after_n_counted_errors_within_the_window(backend: Backend,
                                                         clock: FakeClock) -> None:
    """pybreaker ``fail_max``: the Nth consecutive failure opens the breaker; the job whose
    error opened it says so in its history."""
    flow = _flow()
    ids = _fail(backend, 2, flow)
    assert _state(backend) == "closed"
    (listed,) = backend.breakers()
    assert (listed.key, listed.state, listed.failures) == ("stripe", "closed", 2)
    ids += _fail(backend, 1, flow)
    (listed,) = backend.breakers()
    assert (listed.state, listed.failures, listed.trips) == ("open", 3, 1)
    assert listed.opened_at == clock.now() and listed.probe_at == clock.now() + 30.0
    assert listed.reason is not None and listed.reason.startswith("3 errors within 60s; last:")
    last = events_of(backend, ids[-1])[-1]
    assert last.kind == "breaker" and last.message is not None
    assert last.message.startswith("breaker 'stripe' opened: 3 errors")


def test_errors_spread_wider_than_the_window_do_not_open_it(backend: Backend,
                                                             clock: FakeClock) -> None:
    """resilience4j's time-based sliding window: only failures within ``within`` count."""
    flow = _flow(within=10.0)
    for _ in range(4):
        _fail(backend, 1, flow)
        clock.advance(6.0)
    assert _state(backend) == "closed"
    put(backend, flow=flow)
    assert len(take(backend)) == 1


def test_an_open_key_holds_its_jobs_pending_while_other_jobs_lease(backend: Backend,
                                                                    clock: FakeClock) -> None:
    """Hatchet/Sidekiq: a held key is skipped, not a head-of-line block: jobs of other keys
    and jobs without a key lease; the held job keeps its attempts and errors."""
    flow = _flow()
    _fail(backend, 3, flow)
    held = put(backend, flow=flow)
    other = put(backend, flow=_flow(key="paypal"))
    plain = put(backend)
    taken = {j.id for j in take(backend, count=10)}
    assert taken == {other, plain}
    record = backend.get_job(held)
    assert record is not None
    assert (record.state, record.attempt, record.errors) == (JobState.PENDING, 0, 0)
    assert [e.kind for e in record.events or []] == ["enqueued"]


def test_after_the_cool_down_exactly_one_probe_leases(backend: Backend,
                                                      clock: FakeClock) -> None:
    """pybreaker/resilience4j half-open: after the wait one trial call goes through; workers
    racing for it get one between them."""
    flow = _flow()
    _fail(backend, 3, flow)
    waiting = {put(backend, flow=flow) for _ in range(6)}
    clock.advance(30.0)
    got: list[str] = []
    with connections(backend, clock, 4) as stores:
        def race(i: int) -> None:
            got.extend(j.id for j in take(stores[i], count=3, worker=f"w{i}"))
        run_in_threads(race, 4)
    assert len(got) == 1 and got[0] in waiting
    (listed,) = backend.breakers()
    assert (listed.state, listed.probe_id) == ("half_open", got[0])
    assert [e.message for e in events_of(backend, got[0]) if e.kind == "breaker"] == [
        "probe of breaker 'stripe'"]
    assert take(backend, count=10) == []


def test_probe_success_closes_it_and_the_rest_lease(backend: Backend, clock: FakeClock) -> None:
    """pybreaker: a successful trial call closes the breaker and resets its failure count."""
    flow = _flow()
    _fail(backend, 3, flow)
    rest = {put(backend, flow=flow) for _ in range(3)}
    clock.advance(30.0)
    probe = take_one(backend)
    assert ack(backend, probe)
    assert events_of(backend, probe.id)[-1].message == "breaker 'stripe' closed: probe succeeded"
    assert backend.breakers() == []
    assert {j.id for j in take(backend, count=10)} == rest - {probe.id}


def test_a_fail_answer_of_the_probe_also_closes_it(backend: Backend, clock: FakeClock) -> None:
    """A ``Fail`` is the downstream's answer (a business "no"): the service is up."""
    flow = _flow()
    _fail(backend, 3, flow)
    put(backend, flow=flow)
    clock.advance(30.0)
    assert ack(backend, take_one(backend), Outcome.FAILED, message="card declined")
    assert _state(backend) == "closed"


def test_probe_failure_reopens_it(backend: Backend, clock: FakeClock) -> None:
    """pybreaker/resilience4j: a failed trial call opens the breaker again for a full wait."""
    flow = _flow()
    _fail(backend, 3, flow)
    put(backend, flow=flow)
    other = put(backend, flow=flow)
    clock.advance(30.0)
    probe = take_one(backend)
    assert ack(backend, probe, Outcome.RETRY, error=boom("still 503"), retry_in=600.0)
    (listed,) = backend.breakers()
    assert (listed.state, listed.probe_at, listed.trips) == ("open", clock.now() + 30.0, 2)
    assert events_of(backend, probe.id)[-1].message == (
        "breaker 'stripe' opened again: probe failed")
    assert take(backend) == []
    clock.advance(30.0)
    assert take_one(backend).id == other


def test_failed_outcomes_do_not_count(backend: Backend, clock: FakeClock) -> None:
    """Only errors of the run count (resilience4j ``recordExceptions``/``ignoreExceptions``):
    a ``Fail`` means the downstream answered."""
    flow = _flow()
    for _ in range(5):
        put(backend, flow=flow)
        assert ack(backend, take_one(backend), Outcome.FAILED, message="declined")
    assert backend.breakers() == []
    put(backend, flow=flow)
    assert len(take(backend)) == 1


def test_a_job_that_never_ran_does_not_count(backend: Backend, clock: FakeClock) -> None:
    """An unreadable record or an unknown function is no answer of the downstream."""
    flow = _flow(open_after=1)
    put(backend, flow=flow)
    job = take_one(backend)
    unreadable = Ack(job.id, job.token, Outcome.DEAD, error=boom("unreadable"), ran=False)
    assert backend.ack([unreadable]) == [True]
    assert backend.breakers() == []


def test_retry_after_opens_it_for_its_seconds_with_nothing_spent(backend: Backend,
                                                                 clock: FakeClock) -> None:
    """Oban's snooze, BullMQ's ``RateLimitError``: the downstream said when to come back;
    the key waits that long, no failure is counted and no attempt spent."""
    flow = _flow()
    snoozer = put(backend, flow=flow)
    waiting = put(backend, flow=flow)
    job = take_one(backend)
    assert ack(backend, job, Outcome.SNOOZE, message="HTTP 429", retry_in=45.0)
    (listed,) = backend.breakers()
    assert (listed.state, listed.failures, listed.probe_at) == ("open", 0,
                                                                clock.now() + 45.0)
    assert listed.reason == "paused 45s by RetryAfter"
    record = backend.get_job(snoozer)
    assert record is not None and (record.state, record.errors) == (JobState.SCHEDULED, 0)
    assert events_of(backend, snoozer)[-1].message == (
        "breaker 'stripe' paused for 45s (RetryAfter)")
    clock.advance(44.0)
    assert take(backend) == []
    clock.advance(1.0)
    probe = take_one(backend)
    assert probe.id == waiting and probe.errors == 0


def test_a_dead_probe_worker_lets_a_new_probe_through(backend: Backend,
                                                      clock: FakeClock) -> None:
    """resilience4j's half-open state waits for its trial calls; when the trial's worker is
    lost (lease expired, recovered), the trial is over and another job is the probe."""
    flow = _flow()
    _fail(backend, 3, flow)
    put(backend, flow=flow)
    put(backend, flow=flow)
    clock.advance(30.0)
    first = take_one(backend, lease=5.0)
    assert take(backend) == []
    clock.advance(6.0)
    assert backend.reclaim_expired() == 1
    second = take_one(backend)
    (listed,) = backend.breakers()
    assert (listed.state, listed.probe_id) == ("half_open", second.id)
    assert state_of(backend, first.id) is JobState.PENDING or second.id == first.id


def test_close_breaker_by_hand(backend: Backend, clock: FakeClock) -> None:
    """An operator closes an open breaker (resilience4j ``transitionToClosedState``): its log
    is cleared and its jobs lease at once; closing a closed key says False."""
    flow = _flow()
    _fail(backend, 3, flow)
    held = put(backend, flow=flow)
    assert take(backend) == []
    assert backend.close_breaker("stripe") is True
    assert backend.breakers() == []
    assert take_one(backend).id == held
    assert backend.close_breaker("stripe") is False
    assert backend.close_breaker("nothing") is False


def test_a_job_without_a_breaker_is_never_held(backend: Backend, clock: FakeClock) -> None:
    """A breaker is per key: jobs without one pay nothing and wait for nothing."""
    _fail(backend, 3, _flow())
    plain = [put(backend) for _ in range(3)]
    assert sorted(j.id for j in take(backend, count=10)) == plain
    for _ in range(3):
        put(backend)
        assert ack(backend, take_one(backend), Outcome.RETRY, error=boom(), retry_in=600.0)
    assert [b.key for b in backend.breakers()] == ["stripe"]


def test_errors_of_jobs_leased_before_it_opened_count_without_changing_it(
        backend: Backend, clock: FakeClock) -> None:
    """No retroactive holds (pybreaker lets calls in flight finish): jobs already running
    when it opened end as they end; their errors are logged, the state stays open."""
    flow = _flow()
    for _ in range(4):
        put(backend, flow=flow)
    running = take(backend, count=4)
    assert len(running) == 4
    for job in running[:3]:
        assert ack(backend, job, Outcome.RETRY, error=boom(), retry_in=600.0)
    (before,) = backend.breakers()
    assert ack(backend, running[3], Outcome.RETRY, error=boom(), retry_in=600.0)
    (after,) = backend.breakers()
    assert (after.state, after.probe_at, after.trips) == ("open", before.probe_at, 1)
    assert after.failures == 4


def test_gate_facts_name_the_breaker_that_holds_a_job(backend: Backend,
                                                     clock: FakeClock) -> None:
    """Sidekiq's/Oban's UIs say why a job waits: the store's facts carry its open breaker
    (what the fetch decided by), none for a closed key."""
    flow = _flow()
    _fail(backend, 3, flow)
    free = put(backend, flow=_flow(key="paypal"))
    held = put(backend, flow=flow)
    facts = backend.gate_facts(held)
    assert facts is not None and facts.breaker is not None
    assert (facts.breaker.key, facts.breaker.state, facts.breaker.probe_at) == (
        "stripe", "open", clock.now() + 30.0)
    other = backend.gate_facts(free)
    assert other is not None and other.breaker is None


def test_explain_says_which_breaker_holds_a_job_and_until_when(backend: Backend,
                                                                clock: FakeClock) -> None:
    """Our own promise (client/explain.py): each gate names its holder or its time — an open
    breaker its reason and next probe, a half-open one its running probe."""
    flow = _flow()
    _fail(backend, 3, flow)
    first, second = put(backend, flow=flow), put(backend, flow=flow)
    found = explain(backend, first)
    assert found is not None and found.status == "waiting"
    (reason,) = [r for r in found.reasons if r.gate == "breaker"]
    assert reason.until == clock.now() + 30.0
    assert reason.text.startswith("held by breaker 'stripe': open since ")
    assert "(3 errors within 60s; last: ValueError: 503)" in reason.text
    clock.advance(30.0)
    probe = take_one(backend)
    other = second if probe.id == first else first
    later = explain(backend, other)
    assert later is not None
    (held,) = [r for r in later.reasons if r.gate == "breaker"]
    assert held.text == f"breaker 'stripe' is half-open: probe job {probe.id} is running"
    assert held.holders == (probe.id,)
    assert ack(backend, probe)
    after = explain(backend, other)
    assert after is not None and not [r for r in after.reasons if r.gate == "breaker"]


def test_jobs_behind_an_open_breaker_ask_for_no_worker(backend: Backend,
                                                       clock: FakeClock) -> None:
    """KEDA's Celery scaler concedes queue length misses held work: jobs an open breaker
    holds start on no worker, so they ask for none; jobs beside them still do."""
    flow = _flow()
    _fail(backend, 3, flow)
    for _ in range(20):
        put(backend, flow=flow)
    [hint] = scale_hints(backend, 1, 0.0, ["default"])
    assert (hint.workers, hint.slots, hint.capped) == (0, 0, 20)
    for _ in range(2):
        put(backend)
    [hint] = scale_hints(backend, 1, 0.0, ["default"])
    assert (hint.workers, hint.capped) == (2, 20)
    assert backend.close_breaker("stripe")
    [hint] = scale_hints(backend, 1, 0.0, ["default"])
    assert (hint.workers, hint.capped) == (22, 0)


def test_through_a_broker_an_open_breaker_parks_deliveries_and_one_probe_starts(
        backend: Backend, clock: FakeClock) -> None:
    """With a broker the store decides at ``start`` as at ``dequeue``: a delivery of a held
    key is parked (no attempt), it is due again when the cool-down ends, and of two
    deliveries then one starts as the probe and the other is parked."""
    outbox = cast(Outbox, backend)
    flow = _flow()
    _fail(backend, 3, flow)
    first, second = put(backend, flow=flow), put(backend, flow=flow)
    replies = outbox.start("default", [Arrival(first, False, "m1")], "w1", 30.0)
    assert [r.kind for r in replies] == [StartKind.PARKED]
    assert outbox.publish_due("default", 10, 600.0) == [second]  # not published yet: due
    clock.advance(30.0)
    assert first in outbox.publish_due("default", 10, 600.0)
    replies = outbox.start("default", [Arrival(first, False, "m1"), Arrival(second, False, "m2")],
                           "w1", 30.0)
    assert [r.kind for r in replies] == [StartKind.STARTED, StartKind.PARKED]
    assert [e.message for e in events_of(backend, first) if e.kind == "breaker"] == [
        "probe of breaker 'stripe'"]
    record = backend.get_job(second)
    assert record is not None and (record.state, record.attempt) == (JobState.PENDING, 0)
