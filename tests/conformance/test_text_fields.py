"""Any text, in every field a job can write, on every backend: data round-trips exactly, human
text is stored by the documented rule (lone surrogates become U+FFFD, everything else kept), a
name that cannot be stored or printed safely is refused at the door — never stored half, never
holding up the acknowledgements that come after it (docs/api.md, "Text and data").

Hypothesis draws from all of Unicode, lone surrogates and control characters included. One app
per backend for the whole module, a few examples each, so the test stays fast; CI runs it
derandomized (the ``ci`` profile in tests/conftest.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor import Conveyor, Fail, FakeClock, JobState, current_job
from conveyor.core.job import Ack, EventKind, JobRecord
from conveyor.core.text import storable
from conveyor.errors import InvalidNameError
from conveyor.worker.acker import Acker
from conveyor.worker.config import WorkerConfig
from conveyor.worker.processor import Processor
from tests.conformance.backends import BACKENDS, backend_url, open_backend

EXAMPLES = {"memory": 40, "sqlite": 25, "postgres": 20, "redis": 15, "redis_cluster": 8,
            "redis_sentinel": 8}
TRICKY = ["\ud800", "\udfff", "\udfff\ud800", "\ud83d\ude00", "\x00", "\n", "\r\n", "\t",
          "\x1b[2J", "\u2028", "\u2029", "\x85", "\ufeff", "\ufffd", "😀", "\\ud800", "{x}", "'"]
# Pieces of text: any code point (surrogates and controls included) or a known tricky string.
PIECE = st.one_of(st.characters(exclude_categories=()), st.sampled_from(TRICKY))
TEXT = st.lists(PIECE, max_size=16).map("".join)
MODES = st.sampled_from(["return", "fail", "error"])


@pytest.fixture(scope="module", params=BACKENDS)
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Conveyor]:
    """One app per backend for the module, with the job every example runs."""
    name = str(request.param)
    where = tmp_path_factory.mktemp(name)
    url = backend_url(name, where, request.getfixturevalue)
    open_backend(name, url, FakeClock()).close()  # skip here, not inside hypothesis
    conveyor = Conveyor(url, clock=FakeClock())

    @conveyor.job(name="t.echo", retry=0)
    def echo(text: str, mode: str, **kwargs: Any) -> dict[str, Any]:
        ctx = current_job()
        ctx.log(text, value=text)
        ctx.progress(3, 7)
        if mode == "fail":
            raise Fail(text)
        if mode == "error":
            raise ValueError(text)
        return {"text": text, text: [text, kwargs]}

    @conveyor.job(name="t.good")
    def good() -> int:
        return 1

    conveyor.examples = EXAMPLES[name]  # type: ignore[attr-defined]
    try:
        yield conveyor
    finally:
        conveyor.close()


def _work_off(app: Conveyor, expected: int) -> None:
    """Lease what is pending, run it through the real Processor, ack it in one batch."""
    processor = Processor(app, "w", app.clock)
    acker = Acker(app.storage, app.clock, WorkerConfig(concurrency=1, worker_id="w"))
    jobs = app.storage.dequeue(["default"], "w", expected + 5, 30.0)
    assert len(jobs) == expected
    for job in jobs:
        prepared = processor.prepare(job)
        acker.add(prepared if isinstance(prepared, Ack) else processor.run(prepared))
    assert acker.tick() == expected
    assert len(acker) == 0 and acker.refused == 0, "an ack was held up or refused"


def _as_json(value: Any) -> Any:
    """``value`` as JSON gives it back: identical, except that a high surrogate followed by a
    low one (two code points no UTF-8 text can hold) reads back as the character they spell,
    as JSON defines it."""
    return json.loads(json.dumps(value))


def _get(app: Conveyor, job_id: str) -> JobRecord:
    record = app.get_job(job_id)
    assert record is not None
    return record


def _check_text_fields(app: Conveyor, text: str, mode: str) -> None:
    echo, good = app.registry.get("t.echo"), app.registry.get("t.good")
    assert echo is not None and good is not None
    ref = echo.enqueue(text, mode, k=text)
    after = good.enqueue()  # enqueued behind the poison: must not be held up by it
    _work_off(app, 2)

    record = _get(app, ref.id)
    data = _as_json(text)
    assert record.args == [data, mode] and record.kwargs == {"k": data}  # data: exact
    [logged] = [e for e in record.events or () if e.kind == EventKind.MESSAGE]
    assert logged.message == storable(text)  # human text: the documented rule
    assert logged.data == {"value": data}  # data: exact
    assert record.progress == (3, 7)
    if mode == "return":
        assert record.state is JobState.SUCCEEDED
        assert json.loads(record.result or "null") == {"text": data, data: [data, {"k": data}]}
    elif mode == "fail":
        assert record.state is JobState.FAILED
        assert record.message == (storable(text) or "Fail")
    else:
        assert record.state is JobState.DEAD
        [dead] = [e for e in record.events or () if e.kind == EventKind.DEAD]
        assert dead.data is not None and dead.data["message"] == storable(text)
        last = f"ValueError: {storable(text)}\n" if text else "ValueError\n"
        assert dead.data["traceback"].endswith(last)
        if text:  # the job's message keeps the exception's class (issue 51)
            assert record.message == f"ValueError: {storable(text)}"
    assert _get(app, after.id).state is JobState.SUCCEEDED


def _check_name(app: Conveyor, name: str) -> None:
    before = sum(app.storage.count_jobs(state=s) for s in JobState)
    try:
        ref = app.enqueue(name)
    except InvalidNameError as exc:
        assert "\n" not in str(exc)
        assert sum(app.storage.count_jobs(state=s) for s in JobState) == before  # nothing half
        return
    assert ref is not None
    assert name.isprintable() and _get(app, ref.id).name == name
    _work_off(app, 1)  # not registered: an error with the reason, its ack written like any other
    record = _get(app, ref.id)
    # retried with backoff (an old worker may meet a new job), dead only after its budget
    assert record.state is JobState.RETRYING and "no job named" in (record.message or "")


def test_any_text_in_any_field_is_stored_by_the_rule(app: Conveyor) -> None:
    @settings(max_examples=app.examples, deadline=None,  # type: ignore[attr-defined]
              suppress_health_check=[HealthCheck.too_slow])
    @given(text=TEXT, mode=MODES)
    def check(text: str, mode: str) -> None:
        _check_text_fields(app, text, mode)

    check()


def test_any_job_name_is_stored_exactly_or_refused_at_the_door(app: Conveyor) -> None:
    @settings(max_examples=app.examples, deadline=None,  # type: ignore[attr-defined]
              suppress_health_check=[HealthCheck.too_slow])
    @given(name=st.lists(PIECE, max_size=8).map(lambda p: "n." + "".join(p))
           | st.sampled_from(["", "x" * 300, f"n.{uuid.uuid4().hex}"]))
    def check(name: str) -> None:
        _check_name(app, name)

    check()
