"""Aggregation groups: members wait ``aggregating`` until their group is due, a lead is sent,
and the lead's run gathers the members under its lease (storage/aggregation.py).

Driven through the storage protocol alone, on every backend, with a fake clock.
"""

from __future__ import annotations

from conveyor.core.clock import FakeClock
from conveyor.core.job import BatchSpec, FlowControl, JobSpec, JobState, Outcome
from conveyor.storage import Backend
from conveyor.storage.aggregation import RECHECK
from tests.conformance.helpers import (
    ack,
    boom,
    events_of,
    kinds_of,
    new_job_id,
    spec,
    state_of,
    take,
    take_one,
)

Q = "agg"


def member(key: str = "k", *, grace: float = 5.0, max_delay: float = 60.0, max_size: int = 100,
           name: str = "tests.notify", queue: str = Q, **options: object) -> JobSpec:
    """A member of the group ``key`` of ``name`` on ``queue``."""
    flow = FlowControl(group_key=key, grace=grace, max_delay=max_delay, max_size=max_size)
    return spec(queue, name=name, flow=flow, **options)  # type: ignore[arg-type]


def put_members(backend: Backend, n: int, **kwargs: object) -> list[str]:
    results = backend.enqueue([member(**kwargs) for _ in range(n)])  # type: ignore[arg-type]
    assert all(r.created for r in results)
    return [r.id for r in results]


def states(backend: Backend, ids: list[str]) -> list[JobState]:
    return [state_of(backend, i) for i in ids]


def test_members_wait_until_the_grace_after_the_newest_then_one_leads(
        backend: Backend, clock: FakeClock) -> None:
    ids = put_members(backend, 3)
    assert states(backend, ids) == [JobState.AGGREGATING] * 3
    assert backend.count_jobs(state=JobState.AGGREGATING, queue=Q) == 3
    listed = backend.list_jobs(state=JobState.AGGREGATING, queue=Q)
    assert [r.id for r in listed] == ids and listed[0].state is JobState.AGGREGATING
    [stats] = [q for q in backend.queues() if q.name == Q]
    assert (stats.aggregating, stats.pending) == (3, 0)
    assert take(backend, [Q]) == []  # nothing is pending
    clock.advance(4)
    late = put_members(backend, 1)  # the grace starts again from the newest
    clock.advance(4)
    backend.promote_due()
    assert state_of(backend, ids[0]) is JobState.AGGREGATING
    clock.advance(1.5)
    backend.promote_due()
    assert states(backend, ids + late) == [JobState.PENDING] + [JobState.AGGREGATING] * 3
    assert kinds_of(backend, ids[0])[-1] == "flushed"
    lead = take_one(backend, [Q])
    assert lead.id == ids[0]
    members = backend.gather(lead.id, lead.token)
    assert members is not None
    assert [m.id for m in members] == ids[1:] + late  # oldest first
    assert {m.token for m in members} == {lead.token}
    assert all(m.attempt == 1 for m in members)
    assert states(backend, ids + late) == [JobState.ACTIVE] * 4
    started = events_of(backend, ids[1])[-1]
    assert (started.kind, started.data) == ("started", {"lead": lead.id})
    for job in [lead, *members]:
        assert ack(backend, job)
    assert states(backend, ids + late) == [JobState.SUCCEEDED] * 4
    assert backend.count_jobs(state=JobState.AGGREGATING, queue=Q) == 0


def test_a_group_is_due_at_its_max_delay_however_often_members_arrive(
        backend: Backend, clock: FakeClock) -> None:
    first = put_members(backend, 1, max_delay=10.0)
    for _ in range(3):  # at 3, 6 and 9 s: each within the grace of the one before
        clock.advance(3)
        put_members(backend, 1, max_delay=10.0)
        backend.promote_due()
    assert state_of(backend, first[0]) is JobState.AGGREGATING
    clock.advance(1)  # 10 s after the first, 1 s after the newest
    backend.promote_due()
    assert state_of(backend, first[0]) is JobState.PENDING


def test_the_member_that_fills_a_run_leads_at_once_and_takes_the_oldest(
        backend: Backend, clock: FakeClock) -> None:
    ids = put_members(backend, 7, max_size=3)
    # the 3rd and the 6th each filled a run (the members before them no lead had reserved)
    A, P = JobState.AGGREGATING, JobState.PENDING
    assert states(backend, ids) == [A, A, P, A, A, P, A]
    first = take_one(backend, [Q])
    assert first.id == ids[2]
    members = backend.gather(first.id, first.token)
    assert members is not None and [m.id for m in members] == ids[:2]
    second = take_one(backend, [Q])
    assert second.id == ids[5]
    more = backend.gather(second.id, second.token)
    assert more is not None and [m.id for m in more] == ids[3:5]
    backend.promote_due()
    assert state_of(backend, ids[6]) is JobState.AGGREGATING  # alone: waits for its grace
    clock.advance(5)
    backend.promote_due()
    last = take_one(backend, [Q])
    assert last.id == ids[6] and backend.gather(last.id, last.token) == []


def test_groups_of_one_run_every_member_alone_at_once(backend: Backend) -> None:
    ids = put_members(backend, 3, max_size=1)
    assert states(backend, ids) == [JobState.PENDING] * 3
    runs = take(backend, [Q], count=3)
    assert [backend.gather(j.id, j.token) for j in runs] == [[], [], []]


def test_a_group_that_grew_past_a_run_while_its_lead_waited_is_due_at_once(
        backend: Backend, clock: FakeClock) -> None:
    ids = put_members(backend, 3, max_size=3, grace=100, max_delay=1000)
    assert state_of(backend, ids[2]) is JobState.PENDING
    lead = take_one(backend, [Q])
    backend.cancel(ids[0])  # one of its share leaves: the run takes one member
    got = backend.gather(lead.id, lead.token)
    assert got is not None and [m.id for m in got] == [ids[1]]
    more = put_members(backend, 2, max_size=3, grace=100, max_delay=1000)
    assert states(backend, more) == [JobState.AGGREGATING] * 2
    extra = put_members(backend, 1, max_size=3, grace=100, max_delay=1000)
    assert state_of(backend, extra[0]) is JobState.PENDING  # the three fill a run


def test_groups_are_apart_by_key_name_and_queue(backend: Backend, clock: FakeClock) -> None:
    a = put_members(backend, 2, key="a")
    b = put_members(backend, 2, key="b")
    other = put_members(backend, 2, key="a", name="tests.other")
    elsewhere = put_members(backend, 2, key="a", queue="agg2")
    clock.advance(5)
    backend.promote_due()
    leads = take(backend, [Q, "agg2"], count=10)
    assert sorted(j.id for j in leads) == sorted([a[0], b[0], other[0], elsewhere[0]])
    gathered = {}
    for lead in leads:
        got = backend.gather(lead.id, lead.token)
        assert got is not None
        gathered[lead.id] = [m.id for m in got]
    assert gathered == {a[0]: a[1:], b[0]: b[1:], other[0]: other[1:],
                        elsewhere[0]: elsewhere[1:]}


def test_gather_is_fenced_by_the_leads_lease(backend: Backend, clock: FakeClock) -> None:
    ids = put_members(backend, 3)
    clock.advance(5)
    backend.promote_due()
    lead = take_one(backend, [Q], lease=10)
    assert backend.gather(lead.id, "not-the-token") is None
    clock.advance(11)
    backend.reclaim_expired()
    assert backend.gather(lead.id, lead.token) is None  # its lease expired
    assert states(backend, ids) == [JobState.PENDING] + [JobState.AGGREGATING] * 2
    again = take_one(backend, [Q])
    members = backend.gather(again.id, again.token)
    assert members is not None and [m.id for m in members] == ids[1:]


def test_a_job_that_is_no_member_gathers_nothing(backend: Backend) -> None:
    backend.enqueue([spec(Q)])
    job = take_one(backend, [Q])
    assert backend.gather(job.id, job.token) == []


def test_a_retried_member_goes_back_into_its_group(backend: Backend, clock: FakeClock) -> None:
    ids = put_members(backend, 2)
    clock.advance(5)
    backend.promote_due()
    lead = take_one(backend, [Q])
    members = backend.gather(lead.id, lead.token)
    assert members is not None
    assert ack(backend, lead, Outcome.RETRY, error=boom(), retry_in=10)
    assert ack(backend, members[0], Outcome.RETRY, error=boom(), retry_in=12)
    assert states(backend, ids) == [JobState.RETRYING] * 2
    clock.advance(10)
    backend.promote_due()
    assert states(backend, ids) == [JobState.AGGREGATING, JobState.RETRYING]
    clock.advance(2)
    backend.promote_due()
    assert states(backend, ids) == [JobState.AGGREGATING] * 2
    clock.advance(5)  # the grace after the second came back
    backend.promote_due()
    again = take_one(backend, [Q])
    assert again.id == ids[0] and again.attempt == 2
    got = backend.gather(again.id, again.token)
    assert got is not None and [(m.id, m.attempt, m.errors) for m in got] == [(ids[1], 2, 1)]


def test_a_scheduled_member_joins_when_due(backend: Backend, clock: FakeClock) -> None:
    [late] = put_members(backend, 1, run_at=clock.now() + 30)
    assert state_of(backend, late) is JobState.SCHEDULED
    clock.advance(30)
    backend.promote_due()
    assert state_of(backend, late) is JobState.AGGREGATING


def test_a_cancelled_member_is_left_out(backend: Backend, clock: FakeClock) -> None:
    ids = put_members(backend, 3)
    assert backend.cancel(ids[1]) is JobState.CANCELLED
    assert backend.cancel(ids[0]) is JobState.CANCELLED
    clock.advance(5)
    backend.promote_due()
    lead = take_one(backend, [Q])
    assert lead.id == ids[2] and backend.gather(lead.id, lead.token) == []


def test_a_lead_lost_before_its_gather_is_replaced(backend: Backend, clock: FakeClock) -> None:
    ids = put_members(backend, 3)
    clock.advance(5)
    backend.promote_due()
    assert backend.cancel(ids[0]) is JobState.CANCELLED  # the lead, while pending
    backend.promote_due()
    assert states(backend, ids[1:]) == [JobState.AGGREGATING] * 2  # held by the lead a while
    clock.advance(RECHECK)
    backend.promote_due()
    lead = take_one(backend, [Q])
    assert lead.id == ids[1]
    got = backend.gather(lead.id, lead.token)
    assert got is not None and [m.id for m in got] == ids[2:]


def test_members_of_a_crashed_run_come_back_each_leading(backend: Backend,
                                                         clock: FakeClock) -> None:
    ids = put_members(backend, 3)
    clock.advance(5)
    backend.promote_due()
    lead = take_one(backend, [Q], lease=10)
    assert backend.gather(lead.id, lead.token) is not None
    clock.advance(11)
    assert backend.reclaim_expired() == 3
    assert states(backend, ids) == [JobState.PENDING] * 3
    runs = take(backend, [Q], count=3)
    assert sorted(j.id for j in runs) == ids
    assert all(backend.gather(j.id, j.token) == [] for j in runs)


def test_batch_counters_count_members_aggregating(backend: Backend, clock: FakeClock) -> None:
    batch = BatchSpec(id=new_job_id("b"))
    backend.create_batch(batch)
    ids = [r.id for r in backend.enqueue([member(batch_id=batch.id) for _ in range(3)])]
    backend.close_batch(batch.id)
    status = backend.get_batch(batch.id)
    assert status is not None and status.counts["aggregating"] == 3 and status.total == 3
    clock.advance(5)
    backend.promote_due()
    lead = take_one(backend, [Q])
    members = backend.gather(lead.id, lead.token)
    assert members is not None
    status = backend.get_batch(batch.id)
    assert status is not None
    assert (status.counts.get("aggregating", 0), status.counts["active"]) == (0, 3)
    for job in [lead, *members]:
        assert ack(backend, job)
    status = backend.get_batch(batch.id)
    assert status is not None and status.complete and status.counts["succeeded"] == 3
    assert len(ids) == 3


def test_the_redis_scripts_hold_a_lead_as_long_as_the_python_steps() -> None:
    from pathlib import Path

    import conveyor.storage.redis as redis_pkg

    lua = (Path(redis_pkg.__file__).parent / "lua" / "_groups.lua").read_text()
    assert f"local RECHECK = {RECHECK:g} " in lua
