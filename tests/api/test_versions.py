"""Job versions and safe deploys (docs/durable.md, "Safe deploys"; issue 55 item 5): a job
records the version that enqueued it and, once durable, the one that started it; a worker
runs only what its version accepts, leaving the rest without spending an attempt; upcasters
migrate stored arguments at lease time.

Two apps on one store stand for two deploys (the old code and the new). Where each
expectation comes from is named per test: Temporal's worker versioning (a workflow stays on
the build that started it; a worker polls only what its build runs) and patching, DBOS's
application version (a workflow is recovered only by the version that started it), event
sourcing's upcasters (Axon, Marten). Sidekiq and Oban have no job versions.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState, current_job
from conveyor.core.versions import VERSION_META, VERSION_STEP
from conveyor.testing import drain
from conveyor.worker.versions import LEAVE_FIRST, leave_delay


def _record(app: Conveyor, job_id: str) -> Any:
    record = app.get_job(job_id)
    assert record is not None
    return record


def test_a_worker_leaves_a_durable_job_started_at_a_version_it_does_not_accept(
        app: Conveyor, clock: FakeClock) -> None:
    """DBOS: a workflow is recovered only by the application version that started it;
    Temporal: a workflow's replay stays on a build that can run its history. Left, the job
    spends no attempt of its retry budget and says why (message and a ``snoozed`` event),
    and a worker that accepts the version resumes it, its recorded step not run again."""
    runs: list[str] = []

    def fulfil(order: int) -> str:
        ctx = current_job()
        ctx.step("charge", lambda: runs.append(f"charge {order}"))
        ctx.sleep(60)
        ctx.step("ship", lambda: runs.append(f"ship {order}"))
        return "shipped"

    old = app.job(name="t.fulfil", version=1)(fulfil)
    ref = old.enqueue(7)
    assert ref is not None
    assert drain(app) == 1  # charged, now asleep
    assert [s.name for s in app.storage.durable.read(ref.id).steps] == [
        VERSION_STEP, "charge", "sleep"]

    new = Conveyor(storage=app.storage, clock=clock)
    new.job(name="t.fulfil", version=2)(fulfil).upcaster(from_version=1)(
        lambda a, k: (a, k))  # arguments migrate; a started history does not
    clock.advance(61)
    assert drain(new) == 1
    record = _record(app, ref.id)
    assert record.state is JobState.SCHEDULED and record.errors == 0
    assert "started at version 1" in (record.message or "")
    assert record.events[-1].kind == "snoozed"
    assert "accepts 2" in (record.events[-1].message or "")
    assert runs == ["charge 7"]

    both = Conveyor(storage=app.storage, clock=clock)
    both.job(name="t.fulfil", version=2, accepts=range(1, 3))(fulfil)
    clock.advance(leave_delay(record.attempt) + 1)  # the delay of that lease
    assert drain(both) == 1
    record = _record(app, ref.id)
    assert record.state is JobState.SUCCEEDED and record.errors == 0
    assert runs == ["charge 7", "ship 7"]


def test_upcasters_migrate_the_stored_arguments_up_a_chain(app: Conveyor,
                                                           clock: FakeClock) -> None:
    """Event sourcing's upcasters, chained 1→2→3 at read time; the stored data is never
    rewritten. A job enqueued before its type declared a version counts as version 1."""
    seen: list[tuple[Any, ...]] = []

    def v1(order: int) -> None:
        raise AssertionError("the old code never runs here")

    app.job(name="t.bill", version=1)(v1).enqueue(7)
    app.job(name="t.bill_unversioned")(v1)
    unversioned = app.registry.get("t.bill_unversioned")
    assert unversioned is not None
    ref = unversioned.options(queue="default").enqueue(8)
    assert ref is not None
    assert VERSION_META not in (_record(app, ref.id).payload or "")

    new = Conveyor(storage=app.storage, clock=clock)

    def v3(order_id: int, currency: str) -> None:
        seen.append((current_job().name, order_id, currency))

    for name in ("t.bill", "t.bill_unversioned"):
        fn = new.job(name=name, version=3)(v3)
        fn.upcaster(from_version=1)(lambda a, k: (a, {**k, "currency": "EUR"}))
        fn.upcaster(from_version=2)(lambda a, k: ([], {"order_id": a[0], **k}))
    assert drain(new) == 2
    assert sorted(seen) == [("t.bill", 7, "EUR"), ("t.bill_unversioned", 8, "EUR")]
    stored = json.loads(_record(app, ref.id).payload)
    assert stored["a"] == [8] and stored["k"] == {}


def test_a_job_no_upcaster_reaches_is_left_and_not_leased_in_a_loop(
        mem: Conveyor, clock: FakeClock) -> None:
    """Temporal's worker versioning: a worker never runs a task of a build it does not
    accept. The job is left ``scheduled`` (the ack of ``RetryAfter``), so no worker holds it
    and an incompatible worker meets it again only after a delay that grows."""
    ref = mem.job(name="t.old", version=1)(lambda: None).enqueue()
    assert ref is not None
    new = Conveyor(storage=mem.storage, clock=clock)
    runs: list[int] = []
    newer = new.job(name="t.old", version=3)(lambda: runs.append(1))
    newer.upcaster(from_version=2)(lambda a, k: (a, k))  # 1→2 missing
    assert drain(new) == 1
    assert drain(new) == 0  # not due: the worker does not spin on it
    clock.advance(LEAVE_FIRST + 1)
    assert drain(new) == 1
    record = _record(mem, ref.id)
    assert record.state is JobState.SCHEDULED and record.errors == 0
    assert record.attempt == 2
    assert "enqueued at version 1" in (record.message or "")
    assert "no upcaster chain" in (record.message or "")
    assert runs == []
    assert [leave_delay(n) for n in (1, 2, 3, 9)] == [15.0, 30.0, 60.0, 300.0]


def test_a_wait_first_job_records_its_version_and_a_failing_upcaster_kills_only_its_job(
        mem: Conveyor) -> None:
    """DBOS records the application version with the workflow when it starts; a job whose
    first durable call is a wait records it too. One bad input harms only its own job: an
    upcaster that raises ends it ``dead`` naming the upcaster."""
    @mem.job(name="t.waits", version=2, accepts=(1, 2))
    def waits() -> Any:
        return current_job().wait_for("go", timeout=5)

    def broken(args: list[Any], kwargs: dict[str, Any]) -> Any:
        raise KeyError("customer")

    @mem.job(name="t.broken", version=2)
    def other(x: int) -> None:
        raise AssertionError("never runs")

    other.upcaster(from_version=1)(broken)
    first = waits.enqueue()
    assert first is not None
    bad = Conveyor(storage=mem.storage).enqueue("t.broken", [1])  # the code before versions
    assert bad is not None
    drain(mem)
    steps = {s.name: s for s in mem.storage.durable.read(first.id).steps}
    assert steps[VERSION_STEP].result == "2"
    dead = _record(mem, bad.id)
    assert dead.state is JobState.DEAD
    assert "upcaster from version 1 failed: KeyError" in (dead.message or "")


def test_the_options_are_checked_when_declared(mem: Conveyor) -> None:
    """A declaration that could never work fails at import, not in the worker."""
    with pytest.raises(ValueError, match="accepts= needs version="):
        mem.job(name="t.a", accepts=(1,))(lambda: None)
    with pytest.raises(ValueError, match="version must be an int >= 1"):
        mem.job(name="t.b", version=0)(lambda: None)
    fn = mem.job(name="t.c", version=3, accepts=range(1, 3))(lambda: None)
    assert fn.opts.accepts == frozenset({1, 2, 3})

    @mem.job(name="t.d", retry=0)
    def reserved() -> None:
        current_job().step("@version", lambda: 1)

    ref = reserved.enqueue()
    assert ref is not None
    drain(mem)
    record = _record(mem, ref.id)
    assert record.state is JobState.DEAD and "reserved" in (record.message or "")


def test_every_enqueue_path_stamps_the_version(mem: Conveyor) -> None:
    """DBOS stamps every workflow with the application version that enqueued it; here a
    single enqueue, the bulk path (whose fast encoding carries no meta) and a periodic tick
    all carry it, and an unversioned type's jobs carry nothing."""
    fn = mem.job(name="t.v", version=4)(lambda n: None)
    plain = mem.job(name="t.plain")(lambda n: None)
    one = fn.enqueue(1)
    assert one is not None
    many = fn.enqueue_many([[2], [3]])
    bare = plain.enqueue_many([[4]])
    mem.periodic("* * * * *", name="t.tick", args=[5])(fn)
    declared = mem.schedules.declared  # the code's schedules, as the worker's scheduler has
    spec = next(s for s in declared if s.name == "t.tick").spec(0.0, unique_for=60)
    metas = [json.loads(_record(mem, r.id).payload).get("m", {}) for r in (one, *many)]
    assert metas == [{VERSION_META: 4}] * 3
    assert "m" not in json.loads(_record(mem, bare[0].id).payload)
    assert json.loads(spec.payload)["m"][VERSION_META] == 4
