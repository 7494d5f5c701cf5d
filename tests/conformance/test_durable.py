"""Durable jobs at the storage boundary, on every backend (docs/durable.md, issue 55).

The rules a store keeps for a job's steps, its sleeps and waits, and the messages and events
sent to it. Where each expectation comes from:

* a step's result is stored under the attempt's lease and a zombie's record is refused —
  DBOS records a step's output in the same transaction as its workflow's progress, and our own
  fencing rule for acks (docs/internals/storage.md, "Fencing tokens");
* a recorded step is never replaced (DBOS, Temporal: the first completion is the one replayed);
* a sleeping or waiting job holds no worker and can be cancelled (Inngest ``step.sleep``,
  Hatchet durable sleep; our ``cancel`` of a scheduled job);
* an event reaches every job waiting for its name and key, each once; one sent before the
  wait is lost unless the job type keeps events for a window (Inngest ``waitForEvent``, whose
  docs warn of that race);
* messages to one job by id are kept until received, in order, once (DBOS ``send``/``recv``).
"""

from __future__ import annotations

import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import EventKind, JobState, LeasedJob, Outcome
from conveyor.core.steps import EVENT, FOREVER, MESSAGE, Message, Step, StepStatus, Wait
from conveyor.storage import Backend
from tests.conformance.helpers import ack, events_of, put, state_of, take_one


def _message(id_: str, data: str, clock: FakeClock, *, kind: str = EVENT,
             name: str = "paid", key: str = "42") -> Message:
    # sent_at 0: the store stamps a message with its own clock as it stores it
    return Message(id=id_, kind=kind, name=name, key=key, data=data, sent_at=0.0)


def _wait(clock: FakeClock, *, step: str = "wait:paid", kind: str = EVENT, name: str = "paid",
          key: str = "42", timeout: float | None = 60.0, window: float = 0.0) -> Wait:
    until = FOREVER if timeout is None else clock.now() + timeout
    return Wait(kind=kind, step=step, name=name, key=key, until=until, window=window)


def _suspend(backend: Backend, job: LeasedJob, until: float) -> bool:
    return ack(backend, job, Outcome.SUSPENDED, resume_at=until, message="waiting")


def _steps(backend: Backend, job_id: str) -> dict[str, Step]:
    return {s.name: s for s in backend.durable.read(job_id).steps}


# -- steps ----------------------------------------------------------------------------------


def test_a_step_is_recorded_under_the_lease_with_an_event(backend: Backend,
                                                        clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    step = Step("charge", result='{"id":"ch_1"}', started=clock.now(), ended=clock.now() + 1,
                attempt=job.attempt)
    assert backend.durable.save_steps(job_id, job.token, [step])
    stored = _steps(backend, job_id)["charge"]
    assert (stored.status, stored.result, stored.attempt) == ("ok", '{"id":"ch_1"}', 1)
    event = [e for e in events_of(backend, job_id) if e.kind == EventKind.STEP][-1]
    assert event.data is not None and event.data["name"] == "charge"
    assert event.data["summary"] == '{"id":"ch_1"}'


def test_a_zombie_cannot_record_a_step(backend: Backend, clock: FakeClock) -> None:
    """The lease was taken over: the old holder's step is refused, nothing is written."""
    job_id = put(backend)
    old = take_one(backend, lease=5)
    clock.advance(6)
    assert backend.reclaim_expired() == 1
    new = take_one(backend)
    assert not backend.durable.save_steps(job_id, old.token, [Step("charge", result="1")])
    assert "charge" not in _steps(backend, job_id)
    assert backend.durable.save_steps(job_id, new.token, [Step("charge", result="2")])
    assert _steps(backend, job_id)["charge"].result == "2"


def test_a_final_step_is_never_replaced_but_a_cursor_is(backend: Backend) -> None:
    job_id = put(backend)
    job = take_one(backend)
    durable = backend.durable
    assert durable.save_steps(job_id, job.token, [Step("a", result="1"),
                                                  Step("loop", StepStatus.CURSOR, result="10")])
    assert durable.save_steps(job_id, job.token, [Step("a", result="2"),
                                                  Step("loop", StepStatus.CURSOR, result="20")])
    steps = _steps(backend, job_id)
    assert (steps["a"].result, steps["loop"].result) == ("1", "20")
    assert [s.name for s in durable.read(job_id).steps] == ["a", "loop"]  # first-recorded order


def test_a_retrying_step_is_replaced_by_its_final_record(backend: Backend) -> None:
    job_id = put(backend)
    job = take_one(backend)
    failed = Step("charge", StepStatus.RETRYING, error={"type": "E", "message": "down"}, tries=1,
                  until=99.0)
    assert backend.durable.save_steps(job_id, job.token, [failed])
    assert backend.durable.save_steps(job_id, job.token, [Step("charge", result="7", tries=2)])
    assert _steps(backend, job_id)["charge"].result == "7"


# -- sleeping ---------------------------------------------------------------------------------


def test_a_suspended_job_is_scheduled_until_its_time_and_keeps_its_steps(
        backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    assert backend.durable.save_steps(job_id, job.token, [Step("charge", result="1")])
    until = clock.now() + 3600
    assert _suspend(backend, job, until)
    record = backend.get_job(job_id)
    assert record is not None and record.state is JobState.SCHEDULED
    assert record.run_at == pytest.approx(until) and record.message == "waiting"
    assert record.events is not None and record.events[-1].kind == EventKind.SUSPENDED
    assert record.errors == 0  # not an error attempt
    assert backend.dequeue(["default"], "w1", 5, 30) == []
    clock.advance(3599)
    assert backend.promote_due() == 0
    clock.advance(2)
    assert backend.promote_due() == 1
    again = take_one(backend)
    assert again.attempt == 2 and _steps(backend, job_id)["charge"].result == "1"


def test_a_sleeping_job_can_be_cancelled(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    assert _suspend(backend, take_one(backend), clock.now() + 60)
    assert backend.cancel(job_id) is JobState.CANCELLED
    clock.advance(61)
    backend.promote_due()
    assert backend.dequeue(["default"], "w1", 5, 30) == []
    assert state_of(backend, job_id) is JobState.CANCELLED


def test_a_cancel_request_turns_a_suspension_into_cancelled(backend: Backend,
                                                           clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    backend.cancel(job_id)
    assert _suspend(backend, job, clock.now() + 60)
    assert state_of(backend, job_id) is JobState.CANCELLED


def test_a_sleeping_job_keeps_its_batch_unfinished(backend: Backend, clock: FakeClock) -> None:
    from conveyor.core.job import BatchSpec

    backend.create_batch(BatchSpec(id="b1"))
    job_id = put(backend, batch_id="b1")
    backend.close_batch("b1")
    assert _suspend(backend, take_one(backend), clock.now() + 60)
    status = backend.get_batch("b1")
    assert status is not None and status.finished_at is None
    clock.advance(61)
    backend.promote_due()
    assert ack(backend, take_one(backend))
    status = backend.get_batch("b1")
    assert status is not None and status.finished_at is not None
    assert state_of(backend, job_id) is JobState.SUCCEEDED


# -- events ---------------------------------------------------------------------------------


def test_an_event_reaches_each_waiting_job_once_and_wakes_it(backend: Backend,
                                                             clock: FakeClock) -> None:
    first, second, other = put(backend), put(backend), put(backend)
    for _ in range(2):
        job = take_one(backend)
        received = backend.durable.receive(job.id, job.token, _wait(clock))
        assert received is not None and not received.done
        assert _suspend(backend, job, received.until)
    job = take_one(backend)
    assert job.id == other
    assert backend.durable.send_event(_message("e1", '{"ok":true}', clock), keep=0) == 2
    assert backend.durable.send_event(_message("e2", '{"ok":false}', clock), keep=0) == 0
    assert {state_of(backend, first), state_of(backend, second)} == {JobState.PENDING}
    assert state_of(backend, other) is JobState.ACTIVE
    for _ in range(2):
        job = take_one(backend)
        received = backend.durable.receive(job.id, job.token, _wait(clock))
        assert received is not None and received.done and received.data == '{"ok":true}'
        assert _steps(backend, job.id)["wait:paid"].origin == "e1"
        assert backend.durable.read(job.id).wait is None
    assert EventKind.WOKEN in [e.kind for e in events_of(backend, first)]


def test_an_event_sent_while_the_job_leaves_its_worker_wakes_it(backend: Backend,
                                                              clock: FakeClock) -> None:
    """The wait began (registered), the event came, then the suspension: pending at once."""
    job_id = put(backend)
    job = take_one(backend)
    received = backend.durable.receive(job_id, job.token, _wait(clock))
    assert received is not None and not received.done
    assert backend.durable.send_event(_message("e1", "1", clock), keep=0) == 1
    assert _suspend(backend, job, received.until)
    assert state_of(backend, job_id) is JobState.PENDING
    job = take_one(backend)
    received = backend.durable.receive(job_id, job.token, _wait(clock))
    assert received is not None and received.done and received.data == "1"


def test_an_event_sent_before_the_wait_is_lost_without_a_window(backend: Backend,
                                                               clock: FakeClock) -> None:
    job_id = put(backend)
    assert backend.durable.send_event(_message("e1", "1", clock), keep=0) == 0
    job = take_one(backend)
    received = backend.durable.receive(job_id, job.token, _wait(clock, window=60))
    assert received is not None and not received.done


def test_a_kept_event_reaches_a_later_wait_in_its_window_once(backend: Backend,
                                                              clock: FakeClock) -> None:
    old = _message("e0", "0", clock)
    assert backend.durable.send_event(old, keep=600) == 0
    clock.advance(100)
    assert backend.durable.send_event(_message("e1", "1", clock), keep=600) == 0
    clock.advance(10)
    job_id = put(backend)
    job = take_one(backend)
    # e0 was sent 110 s before the wait: outside its 60 s window; e1 inside it.
    received = backend.durable.receive(job_id, job.token, _wait(clock, step="w1", window=60))
    assert received is not None and received.done and received.data == "1"
    again = backend.durable.receive(job_id, job.token, _wait(clock, step="w2", window=60))
    assert again is not None and not again.done  # e1 is not received twice


def test_a_wait_times_out_with_null_and_keeps_its_first_deadline(backend: Backend,
                                                                 clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    received = backend.durable.receive(job_id, job.token, _wait(clock, timeout=10))
    assert received is not None and not received.done
    until = received.until
    assert _suspend(backend, job, until)
    clock.advance(10)
    assert backend.promote_due() == 1
    job = take_one(backend)
    # The replay asks with a later deadline (its clock moved): the first one stands.
    received = backend.durable.receive(job_id, job.token, _wait(clock, timeout=10))
    assert received is not None and received.done and received.data is None
    assert _steps(backend, job_id)["wait:paid"].result is None
    assert backend.durable.send_event(_message("late", "1", clock), keep=0) == 0


def test_a_cancelled_jobs_wait_hears_nothing_until_it_is_retried(backend: Backend,
                                                                  clock: FakeClock) -> None:
    """A finished job receives nothing; retried by hand it replays, and its wait (kept
    with its first deadline) hears events again."""
    job_id = put(backend)
    job = take_one(backend)
    received = backend.durable.receive(job_id, job.token, _wait(clock, timeout=600))
    assert received is not None and _suspend(backend, job, received.until)
    assert backend.cancel(job_id) is JobState.CANCELLED
    assert backend.durable.send_event(_message("e1", "1", clock), keep=0) == 0
    assert backend.retry_jobs([job_id]) == 1
    job = take_one(backend)
    again = backend.durable.receive(job_id, job.token, _wait(clock, timeout=9999))
    assert again is not None and not again.done and again.until == pytest.approx(received.until)
    assert backend.durable.send_event(_message("e2", "2", clock), keep=0) == 1
    taken = backend.durable.receive(job_id, job.token, _wait(clock))
    assert taken is not None and taken.done and taken.data == "2"


def test_a_zombie_cannot_take_a_message(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    old = take_one(backend, lease=5)
    assert backend.durable.send(job_id, _message("m1", "1", clock, kind=MESSAGE, name="t",
                                                 key="")) is True
    clock.advance(6)
    backend.reclaim_expired()
    new = take_one(backend)
    wait = _wait(clock, kind=MESSAGE, name="t", key="", step="recv:t")
    assert backend.durable.receive(job_id, old.token, wait) is None
    received = backend.durable.receive(job_id, new.token, wait)
    assert received is not None and received.done and received.data == "1"


# -- messages to one job --------------------------------------------------------------------


def test_messages_are_kept_until_received_in_order_and_once(backend: Backend,
                                                           clock: FakeClock) -> None:
    job_id = put(backend)
    durable = backend.durable
    for i, topic in enumerate(["t", "other", "t", "t"]):
        sent = _message(f"m{i}", str(i), clock, kind=MESSAGE, name=topic, key="")
        assert durable.send(job_id, sent) is True
        clock.advance(1)
    assert durable.send(job_id, _message("m0", "0", clock, kind=MESSAGE, name="t", key=""))
    assert durable.read(job_id).inbox == 4  # the resent m0 is stored once
    job = take_one(backend)
    got = []
    for n in range(4):
        wait = _wait(clock, kind=MESSAGE, name="t", key="", step=f"recv:t#{n}", timeout=0)
        received = durable.receive(job_id, job.token, wait)
        assert received is not None and received.done
        got.append(received.data)
    assert got == ["0", "2", "3", None]
    assert durable.read(job_id).inbox == 1  # "other" waits for its own receive


def test_a_message_wakes_a_job_waiting_for_its_topic_only(backend: Backend,
                                                          clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    wait = _wait(clock, kind=MESSAGE, name="t", key="", step="recv:t")
    received = backend.durable.receive(job_id, job.token, wait)
    assert received is not None and not received.done
    assert _suspend(backend, job, received.until)
    other = _message("m1", "1", clock, kind=MESSAGE, name="other", key="")
    assert backend.durable.send(job_id, other) is True
    assert state_of(backend, job_id) is JobState.SCHEDULED
    assert backend.durable.send(job_id, _message("m2", "2", clock, kind=MESSAGE, name="t",
                                                 key=""))
    assert state_of(backend, job_id) is JobState.PENDING


def test_a_message_to_a_finished_or_unknown_job_is_refused(backend: Backend,
                                                         clock: FakeClock) -> None:
    job_id = put(backend)
    assert ack(backend, take_one(backend))
    sent = _message("m1", "1", clock, kind=MESSAGE, name="t", key="")
    assert backend.durable.send(job_id, sent) is False
    assert backend.durable.send("no-such-job", sent) is None
    assert backend.durable.read(job_id).inbox == 0


def test_deleting_a_job_drops_its_durable_records(backend: Backend, clock: FakeClock) -> None:
    job_id = put(backend)
    job = take_one(backend)
    assert backend.durable.receive(job_id, job.token, _wait(clock)) is not None
    assert backend.durable.save_steps(job_id, job.token, [Step("a", result="1")])
    assert backend.durable.send(job_id, _message("m1", "1", clock, kind=MESSAGE, name="t",
                                                 key=""))
    assert _suspend(backend, job, clock.now() + 60)
    assert backend.delete_jobs([job_id]) == 1
    history = backend.durable.read(job_id)
    assert (history.steps, history.wait, history.inbox) == ([], None, 0)
    assert backend.durable.send_event(_message("e1", "1", clock), keep=0) == 0
