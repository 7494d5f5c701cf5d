"""Durable jobs as job code sees them (docs/durable.md, issue 55): steps, sleeps, waits,
messages, resumable loops, run by ``conveyor.testing.drain`` (the worker's own processor).

Where each expectation comes from is named per test: DBOS (steps recorded once and replayed,
``recv``/``send``, step retries), Inngest (``step.sleep``, ``waitForEvent`` returning null at
its timeout, repeated step ids in a loop counted), Temporal (replay from the top: code between
steps runs again), Sidekiq 7.3 iterable jobs and Rails 8.1 continuations (a loop resumes at
its cursor after an interruption; cancel between items).
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobContext, JobState, StepFailed, current_job
from conveyor.errors import JobNotFound
from conveyor.testing import drain


def _state(app: Conveyor, job_id: str) -> JobState:
    record = app.get_job(job_id)
    assert record is not None
    return record.state


def test_a_recorded_step_never_runs_again_when_the_job_is_retried(app: Conveyor) -> None:
    """DBOS/Temporal: after a crash or an error, completed steps return their recorded
    results; only the work after them runs again."""
    runs: list[str] = []
    between = []

    @app.job(name="t.charge_then_fail", retry=2, retry_in=lambda *_: 0)
    def job(order: int) -> Any:
        ctx = current_job()
        charge = ctx.step("charge", lambda: runs.append("charge") or {"id": f"ch_{order}"})
        between.append(ctx.attempt)  # code between steps is not durable: it runs again
        if ctx.attempt == 1:
            raise RuntimeError("mail server down")
        ctx.step("email", lambda: runs.append("email"))
        return charge

    ref = job.enqueue(7)
    assert drain(app) == 2
    assert runs == ["charge", "email"]
    assert between == [1, 2]
    record = app.get_job(ref.id)
    assert record is not None and record.state is JobState.SUCCEEDED
    assert record.result == '{"id":"ch_7"}'
    steps = app.storage.durable.read(ref.id).steps
    assert [(s.name, s.attempt) for s in steps] == [("charge", 1), ("email", 2)]


def test_a_name_repeated_in_a_loop_gets_an_index(mem: Conveyor) -> None:
    """Inngest counts a step id used again in a loop; the replay makes the same calls in the
    same order, so each gets its own record."""
    @mem.job(name="t.loop", retry=1, retry_in=lambda *_: 0)
    def job() -> list[int]:
        ctx = current_job()
        got = [ctx.step("fetch", lambda i=i: i * 10) for i in range(3)]
        if ctx.attempt == 1:
            raise RuntimeError("once")
        return got

    ref = job.enqueue()
    drain(mem)
    record = mem.get_job(ref.id)
    assert record is not None and record.result == "[0,10,20]"
    names = [s.name for s in mem.storage.durable.read(ref.id).steps]
    assert names == ["fetch", "fetch#2", "fetch#3"]


def test_a_step_id_is_stable_across_attempts_for_idempotency_keys(mem: Conveyor) -> None:
    seen: list[str] = []

    @mem.job(name="t.ids", retry=1, retry_in=lambda *_: 0)
    def job() -> None:
        ctx = current_job()

        def pay() -> None:
            seen.append(current_job().step_id)
            if len(seen) == 1:
                raise RuntimeError("timed out after charging")  # at-least-once: runs again

        ctx.step("pay", pay)

    ref = job.enqueue()
    drain(mem)
    assert seen == [f"{ref.id}/pay", f"{ref.id}/pay"]
    with pytest.raises(RuntimeError, match="only inside a step"):
        JobContext(job_id="x", name="n").step_id  # noqa: B018


def test_a_step_retries_on_its_own_sleeping_between_tries(mem: Conveyor,
                                                          clock: FakeClock) -> None:
    """DBOS steps retry with their own policy; here the job sleeps between tries (no worker
    held) and the tries survive the job leaving its worker."""
    tries: list[int] = []

    @mem.job(name="t.flaky", retry=0)
    def job() -> str:
        def flaky() -> str:
            tries.append(1)
            if len(tries) < 3:
                raise ConnectionError("flaky")
            return "ok"

        return current_job().step("call", flaky, retries=3, retry_in=10)

    ref = job.enqueue()
    drain(mem)
    assert (len(tries), _state(mem, ref.id)) == (1, JobState.SCHEDULED)
    clock.advance(10)
    drain(mem)
    assert len(tries) == 2
    clock.advance(10)
    drain(mem)
    record = mem.get_job(ref.id)
    assert record is not None and record.state is JobState.SUCCEEDED and record.errors == 0
    assert len(tries) == 3


def test_a_step_past_its_retries_fails_the_job_and_replays_its_error(mem: Conveyor,
                                                                     clock: FakeClock) -> None:
    runs: list[int] = []
    caught: list[str] = []

    @mem.job(name="t.broken", retry=0)
    def job() -> None:
        ctx = current_job()
        try:
            ctx.step("call", lambda: runs.append(1) or 1 / 0, retries=1, retry_in=5)
        except StepFailed as exc:
            caught.append(exc.error["type"])
            ctx.step("compensate", lambda: None)
            raise

    ref = job.enqueue()
    drain(mem)
    clock.advance(5)
    drain(mem)
    record = mem.get_job(ref.id)
    assert record is not None and record.state is JobState.FAILED
    assert record.message == "step call failed: ZeroDivisionError: division by zero"
    assert runs == [1, 1] and caught == ["ZeroDivisionError"]
    assert mem.storage.durable.read(ref.id).steps[0].status == "error"


def test_sleep_leaves_the_worker_and_resumes_after_the_time(app: Conveyor,
                                                            clock: FakeClock) -> None:
    """Inngest ``step.sleep`` / DBOS ``sleep``: the job is not running while it sleeps."""
    after: list[int] = []

    @app.job(name="t.sleeper")
    def job() -> str:
        ctx = current_job()
        ctx.sleep(3600)
        after.append(ctx.attempt)
        return "woke"

    ref = job.enqueue()
    assert drain(app) == 1
    record = app.get_job(ref.id)
    assert record is not None and record.state is JobState.SCHEDULED
    assert record.message is not None and record.message.startswith("sleeping until")
    clock.advance(3599)
    assert drain(app) == 0 and after == []
    clock.advance(1)
    assert drain(app) == 1 and after == [2]
    assert _state(app, ref.id) is JobState.SUCCEEDED


def test_sleep_until_and_cancel_while_sleeping(mem: Conveyor, clock: FakeClock) -> None:
    @mem.job(name="t.until")
    def job() -> None:
        current_job().sleep_until(clock.now() + 60)

    ref = job.enqueue()
    drain(mem)
    assert mem.cancel(ref.id) is JobState.CANCELLED
    clock.advance(61)
    assert drain(mem) == 0 and _state(mem, ref.id) is JobState.CANCELLED


def test_wait_for_returns_the_event_or_none_at_its_timeout(mem: Conveyor,
                                                          clock: FakeClock) -> None:
    """Inngest ``waitForEvent``: the event's data, or null once the timeout passed."""
    got: dict[str, Any] = {}

    @mem.job(name="t.waiter")
    def job(order: str) -> None:
        got[order] = current_job().wait_for("paid", key=order, timeout=3600)

    a, b = job.enqueue("a"), job.enqueue("b")
    drain(mem)
    assert mem.send_event("paid", key="a", data={"ok": True}) == 1
    drain(mem)
    assert got == {"a": {"ok": True}} and _state(mem, b.id) is JobState.SCHEDULED
    clock.advance(3600)
    drain(mem)
    assert got == {"a": {"ok": True}, "b": None}
    assert {_state(mem, a.id), _state(mem, b.id)} == {JobState.SUCCEEDED}


def test_an_event_before_the_wait_counts_only_within_the_job_types_window(
        mem: Conveyor, clock: FakeClock) -> None:
    """The documented race: an event sent before the wait began is lost, unless the job
    type keeps events for a window (``event_window``), which send_event keeps them for."""
    got: list[Any] = []

    @mem.job(name="t.late", event_window=300)
    def late() -> None:
        got.append(current_job().wait_for("shipped", key="1", timeout=0))

    @mem.job(name="t.strict")
    def strict() -> None:
        got.append(current_job().wait_for("shipped", key="1", timeout=0, window=0))

    assert mem.send_event("shipped", key="1", data="box") == 0
    clock.advance(100)
    late.enqueue()
    strict.enqueue()
    drain(mem)
    assert got == ["box", None]  # late, then strict (FIFO)


def test_messages_to_a_job_are_received_in_order(mem: Conveyor) -> None:
    """DBOS ``send``/``recv``: kept until received, in order, each once; None at the
    timeout."""
    got: list[Any] = []

    @mem.job(name="t.inbox")
    def job() -> None:
        ctx = current_job()
        got.extend(ctx.receive("cmd", timeout=60) for _ in range(2))

    ref = job.enqueue()
    assert mem.send(ref.id, "cmd", "first") is True
    assert mem.send(ref.id, "cmd", "second") is True
    drain(mem)
    assert got == ["first", "second"] and _state(mem, ref.id) is JobState.SUCCEEDED
    assert mem.send(ref.id, "cmd", "late") is False
    with pytest.raises(JobNotFound):
        mem.send("no-such-job", "cmd", 1)


def test_a_message_wakes_a_job_waiting_for_it(mem: Conveyor) -> None:
    got: list[Any] = []

    @mem.job(name="t.listen")
    def job() -> None:
        got.append(current_job().receive("go"))

    ref = job.enqueue()
    drain(mem)
    assert _state(mem, ref.id) is JobState.SCHEDULED
    mem.send(ref.id, "go", {"n": 1})
    assert _state(mem, ref.id) is JobState.PENDING
    drain(mem)
    assert got == [{"n": 1}]


def test_durable_calls_inside_a_step_are_refused(mem: Conveyor) -> None:
    @mem.job(name="t.nested", retry=0)
    def job() -> None:
        ctx = current_job()
        ctx.step("outer", lambda: ctx.sleep(1))

    ref = job.enqueue()
    drain(mem)
    record = mem.get_job(ref.id)
    assert record is not None and record.state is JobState.DEAD
    assert "cannot be made inside a step" in (record.message or "")


def test_a_sleeping_node_holds_its_workflow(mem: Conveyor, clock: FakeClock) -> None:
    """Issue 55 item 6: a workflow counts a sleeping job as not finished."""
    order: list[str] = []

    @mem.job(name="t.first")
    def first() -> None:
        current_job().sleep(60)
        order.append("first")

    @mem.job(name="t.second")
    def second() -> None:
        order.append("second")

    flow = mem.workflow()
    head = flow.add(first.s())
    flow.add(second.s(), after=[head])
    flow.enqueue()
    drain(mem)
    assert order == [] and mem.batch_status(flow.id)["finished_at"] is None
    clock.advance(60)
    drain(mem)
    assert order == ["first", "second"]


def test_a_step_name_breaking_the_name_rule_fails_only_its_job(mem: Conveyor) -> None:
    """A name with a line break could forge the CLI's lines and the stores' separators: the
    call raises in the job (an error of the job's own code, with its retries), naming it."""
    @mem.job(name="t.badname", retry=0)
    def bad() -> None:
        current_job().step("charge\nok", lambda: 1)

    @mem.job(name="t.fine")
    def fine() -> int:
        return current_job().step("charge", lambda: 1)

    bad_ref, fine_ref = bad.enqueue(), fine.enqueue()
    drain(mem)
    record = mem.get_job(bad_ref.id)
    assert record is not None and record.state is JobState.DEAD
    assert "step name" in (record.message or "") and "printable" in (record.message or "")
    assert _state(mem, fine_ref.id) is JobState.SUCCEEDED


def test_an_async_job_makes_the_same_durable_calls(mem: Conveyor, clock: FakeClock) -> None:
    """The calls are the same in an ``async def`` job (its suspension crosses the event
    loop's path to the worker like any outcome)."""
    ran: list[str] = []

    @mem.job(name="t.async_durable")
    async def job() -> str:
        ctx = current_job()
        ctx.step("once", lambda: ran.append("once"))
        ctx.sleep(10)
        return "done"

    ref = job.enqueue()
    drain(mem)
    assert _state(mem, ref.id) is JobState.SCHEDULED
    clock.advance(10)
    drain(mem)
    assert ran == ["once"] and _state(mem, ref.id) is JobState.SUCCEEDED
