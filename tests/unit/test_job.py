"""The job vocabulary: states, events on the wire, flow control, records, batch status."""

from __future__ import annotations

import json
import time

import pytest

from conveyor.core.ids import new_id
from conveyor.core.job import (
    ALL_STATES,
    TERMINAL_STATES,
    ErrorInfo,
    Event,
    EventKind,
    FlowControl,
    JobRecord,
    JobState,
    Outcome,
    decode_events,
)
from conveyor.storage.batch_records import BatchStatus
from conveyor.storage.workers import BusySlot, WorkerInfo


def test_terminal_states() -> None:
    assert {s for s in ALL_STATES if s.terminal} == set(TERMINAL_STATES) == {
        JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED}
    assert not JobState.RETRYING.terminal and not JobState.ACTIVE.terminal


def test_states_and_outcomes_print_as_their_wire_value() -> None:
    assert str(JobState.PENDING) == "pending" and JobState("dead") is JobState.DEAD
    assert str(Outcome.RETRY) == "retry" and Outcome("interrupted") is Outcome.INTERRUPTED


def test_event_round_trips_through_the_wire_form() -> None:
    event = Event(ts=12.5, kind=EventKind.ERROR, state="retrying", message="db down",
                  worker="w1", attempt=3, data={"type": "OSError", "retry": True})
    assert Event.from_wire(json.loads(event.to_json())) == event


def test_event_wire_form_leaves_out_empty_fields() -> None:
    event = Event(ts=1.0, kind=EventKind.MESSAGE, message="hi")
    assert event.to_wire() == {"t": 1.0, "k": "message", "m": "hi"}
    assert "\n" not in event.to_json()


def test_event_as_dict_is_readable() -> None:
    event = Event(ts=2.0, kind="started", state="active", worker="w9", attempt=1)
    assert event.as_dict() == {"ts": 2.0, "kind": "started", "state": "active", "message": None,
                               "worker": "w9", "attempt": 1, "data": None}


def test_decode_events_survives_a_damaged_line() -> None:
    good = Event(ts=1.0, kind="enqueued", state="pending")
    log = "\n".join([good.to_json(), "{not json", "", '{"no": "keys"}', good.to_json()])
    events = decode_events(log)
    assert [e.kind for e in events] == ["enqueued", "message", "message", "enqueued"]
    assert events[1].message is not None and events[1].message.startswith("unreadable event")
    assert decode_events(None) == [] and decode_events("") == []


def test_flow_control_wire_form_keeps_only_what_is_set() -> None:
    flow = FlowControl(unique_key="u", unique_for=30.0, rate_key="api", rate_limit=5,
                       rate_period=1.0)
    wire = flow.to_wire()
    assert wire == {"unique_key": "u", "unique_for": 30.0, "rate_key": "api", "rate_limit": 5,
                    "rate_period": 1.0}
    assert FlowControl.from_wire(wire) == flow
    assert FlowControl().to_wire() == {}
    assert FlowControl.from_wire(None) is None and FlowControl.from_wire({}) is None


def test_error_info_wire_form() -> None:
    info = ErrorInfo(type="KeyError", message="'x'", traceback="Traceback ...")
    assert info.to_wire() == {"type": "KeyError", "message": "'x'", "traceback": "Traceback ..."}


def _record(**kwargs: object) -> JobRecord:
    base: dict[str, object] = {"id": "j1", "name": "app.send", "queue": "default",
                               "payload": '{"a":[1,"x"],"k":{"to":"a@b"}}',
                               "state": JobState.SUCCEEDED}
    base.update(kwargs)
    return JobRecord(**base)  # type: ignore[arg-type]


def test_record_decodes_its_arguments() -> None:
    record = _record()
    assert record.args == [1, "x"] and record.kwargs == {"to": "a@b"}


@pytest.mark.parametrize("payload", ["not json", "[1, 2]", '{"k": {}}'])
def test_record_with_an_odd_payload_has_empty_arguments(payload: str) -> None:
    record = _record(payload=payload)
    assert record.args == [] and record.kwargs == {}


def test_record_as_dict() -> None:
    events = [Event(ts=1.0, kind="enqueued", state="pending")]
    record = _record(result='{"ok": true}', progress=(3, 4), events=events)
    out = record.as_dict()
    assert out["state"] == "succeeded" and out["result"] == {"ok": True}
    assert out["progress"] == [3, 4] and out["args"] == [1, "x"]
    assert out["events"] == [events[0].as_dict()]
    assert "events" not in record.as_dict(with_events=False)
    assert _record().as_dict()["result"] is None
    json.dumps(out)  # JSON-ready


def _status(**kwargs: object) -> BatchStatus:
    base: dict[str, object] = {"id": "b1", "description": None, "meta": {}, "created_at": 100.0,
                               "total": 4, "counts": {}}
    base.update(kwargs)
    return BatchStatus(**base)  # type: ignore[arg-type]


def test_batch_status_progress() -> None:
    status = _status(counts={"succeeded": 1, "failed": 1, "pending": 2}, started_at=100.0)
    assert status.done == 2 and status.percent == 50.0 and not status.complete
    assert status.eta(110.0) == pytest.approx(10.0)  # 2 done in 10 s, 2 to go
    closed = _status(counts={"succeeded": 3, "dead": 1}, closed=True, started_at=100.0)
    assert closed.complete and closed.percent == 100.0 and closed.eta(200.0) is None


def test_batch_status_edge_cases() -> None:
    empty = _status(total=0, closed=True)
    assert empty.complete and empty.percent == 100.0
    assert _status(counts={"pending": 4}).eta(150.0) is None  # nothing done yet
    assert _status(counts={"succeeded": 1}).eta(150.0) is None  # never started


def test_batch_status_as_dict() -> None:
    status = _status(counts={"succeeded": 2, "active": 1}, started_at=100.0, closed=True,
                     callbacks_fired=("death",))
    out = status.as_dict(now=120.0)
    assert out["counts"]["succeeded"] == 2 and out["counts"]["pending"] == 0
    assert set(out["counts"]) == {s.value for s in ALL_STATES}
    assert (out["done"], out["percent"], out["elapsed"]) == (2, 50.0, 20.0)
    assert out["callbacks_fired"] == ["death"] and out["complete"] is False
    json.dumps(out)


def test_worker_info_round_trips() -> None:
    info = WorkerInfo(id="w1", hostname="h", pid=7, queues=("a", "b"), concurrency=4,
                      started_at=5.0, status="quiet",
                      busy=(BusySlot("j1", "app.send", "a", 6.0),), last_seen=9.0)
    assert WorkerInfo.from_wire(json.loads(json.dumps(info.to_wire()))) == info


def test_new_ids_are_unique_and_time_ordered() -> None:
    first = new_id()
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(len(i) == 24 for i in ids)
    time.sleep(0.002)  # ids carry milliseconds: the next millisecond sorts after
    assert new_id() > first
