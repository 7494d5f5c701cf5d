"""A durable job's data as the client and the job see it (docs/durable.md, "Job data"): what
``app.send``/``send_event`` hand the store, what a sealed value is bound to, the size rule of
steps and messages, and a resumed job's typed arguments. What every store keeps is held by
tests/conformance/test_durable_data.py.

Expectations: Temporal's payload codecs (signal payloads are encoded on the client before they
reach the server; a payload copied elsewhere does not decode), DBOS's ``send``/``recv`` (a
message is data the workflow reads back whole), our own size rule for arguments and results
(docs/api.md, "Size") and i57's typed arguments (docs/job-data.md: a job gets its model back
on every run, a durable resumption being one more run).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from conveyor import Conveyor, FakeClock, JobState, Keys, current_job
from conveyor.client.durable import bound_of, stored_value, value_json
from conveyor.core.steps import Message
from conveyor.errors import PayloadError, UnsealError
from conveyor.testing import drain
from tests.api.typed_models import Point

SECRET = "iban-DE89-3704"
KEYS = Keys({"k1": Keys.generate()}, jobs=["billing.*"])


@pytest.fixture
def sealed(clock: FakeClock) -> Any:
    app = Conveyor("memory://", clock=clock, encrypt=KEYS)
    try:
        yield app
    finally:
        app.close()


def test_messages_and_events_leave_the_client_sealed_whatever_the_receiving_job(
        sealed: Conveyor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Temporal encodes a signal's payload on the client, before the server sees it. The
    sender cannot know which job type an event reaches (nor, without a read, a message), so
    with keys both are sealed even for a job type the keys' ``jobs=`` leaves clear; the
    receiving job reads them in clear."""
    handed: list[Message] = []
    durable = sealed.storage.durable
    for name in ("send", "send_event"):
        call = getattr(durable, name)
        monkeypatch.setattr(durable, name,
                            lambda *a, _call=call, **k: handed.append(
                                next(x for x in a if isinstance(x, Message))) or _call(*a, **k))
    got: dict[str, Any] = {}  # each replay reads them again

    @sealed.job(name="shop.refund")  # not a billing.* job: its own data stays clear
    def refund() -> None:
        ctx = current_job()
        got["iban"] = ctx.receive("iban", timeout=60)
        got["approved"] = ctx.wait_for("approved", "r1", timeout=60)

    ref = refund.enqueue()
    drain(sealed)
    assert sealed.send(ref.id, "iban", {"iban": SECRET}) is True
    drain(sealed)
    assert sealed.send_event("approved", "r1", SECRET) == 1
    drain(sealed)
    assert got == {"iban": {"iban": SECRET}, "approved": SECRET}
    assert len(handed) == 2 and all(SECRET not in m.data for m in handed)
    assert all(m.data.startswith('{"$conveyor":{"e":"k1"') for m in handed)


def test_a_sealed_value_opens_only_where_it_was_bound() -> None:
    """A ciphertext copied into another step, another job or another event does not open
    (Temporal binds nothing, so this is our own rule: docs/job-data.md, "Bound to its job")."""
    app = Conveyor("memory://", encrypt=Keys({"k1": Keys.generate()}))
    try:
        data = app.data
        step = bound_of("step", "job-1", "charge")
        text = stored_value(data, value_json({"card": SECRET}, "x"), step, seal=True,
                            offload=False, max_payload=10_000, what="x")
        assert SECRET not in text and data.open_value(text, step) == {"card": SECRET}
        for elsewhere in (bound_of("step", "job-1", "refund"), bound_of("step", "job-2",
                                                                        "charge"),
                          bound_of("message", "job-1"), bound_of("event", "charge", "job-1")):
            with pytest.raises(UnsealError):
                data.open_value(text, elsewhere)
    finally:
        app.close()


def test_a_step_result_or_a_message_over_max_payload_is_refused_in_one_line(
        clock: FakeClock) -> None:
    """The size rule of arguments and results (docs/api.md, "Size") holds for a step's result
    (the job's error, retried as any) and a message (refused at the send, nothing stored)."""
    app = Conveyor("memory://", clock=clock, max_payload=1024)
    try:
        @app.job(name="t.big_step", retry=0)
        def big() -> None:
            current_job().step("fetch", lambda: "x" * 2000)
            current_job().receive("more")

        ref = big.enqueue()
        drain(app)
        record = app.get_job(ref.id)
        assert record is not None and record.state is JobState.DEAD
        assert record.message is not None and "\n" not in record.message
        assert "step fetch's result is 2,002 bytes, over max_payload" in record.message
        other = big.enqueue()
        with pytest.raises(PayloadError, match="message 'more''s data is 2,002 bytes"):
            app.send(other.id, "more", "x" * 2000)
        assert app.storage.durable.read(other.id).inbox == 0
    finally:
        app.close()


@dataclasses.dataclass
class Seen:
    attempt: int
    point: Any


def test_a_resumed_job_gets_its_typed_arguments_again(mem: Conveyor, clock: FakeClock) -> None:
    """i57's typed arguments: the worker makes the model from the stored JSON on every run; a
    durable job resumed after its sleep is one more run, so it gets a ``Point`` again, not
    the dict the store holds."""
    seen: list[Seen] = []

    @mem.job(name="t.typed_sleeper")
    def walk(point: Point) -> float:
        ctx = current_job()
        seen.append(Seen(ctx.attempt, point))
        moved = ctx.step("move", lambda: {"x": point.x + 1, "y": point.y})
        ctx.sleep(60)
        return moved["x"] + point.y

    ref = walk.enqueue(Point(1.5, 2.0, "home"))
    drain(mem)
    clock.advance(60)
    drain(mem)
    assert ref.result(timeout=5) == 4.5
    assert [s.attempt for s in seen] == [1, 2]
    assert all(s.point == Point(1.5, 2.0, "home") for s in seen)
