"""What the CLI prints is safe for a terminal, and a damaged record is shown, not a crash.

Job data comes from whoever can enqueue and from job code: an ANSI escape or a carriage
return in it must reach the operator's screen as visible text, on every backend.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.cli.jobs import format_job, format_list, list_row
from conveyor.cli.main import main
from conveyor.cli.terminal import safe
from conveyor.core.job import Event, EventKind, JobRecord, JobState, Outcome
from conveyor.views.records import job_view
from tests.web.seed import make_app, run_one

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\rforged\nline\u202eevil\x9b"
ESCAPED = "\\x1b]0;pwned\\x07\\x1b[2J\\rforged\\nline\\u202eevil\\x9b"


def test_safe_escapes_what_a_terminal_acts_on() -> None:
    assert safe(HOSTILE) == ESCAPED
    assert safe("a\ud800b\tc") == "a\\ud800b\\tc"
    assert safe("línea 1\nlínea 2", keep_newlines=True) == "línea 1\nlínea 2"
    assert safe("plain ünïcödé ✓ 日本") == "plain ünïcödé ✓ 日本"


@pytest.fixture(params=["sqlite", "redis"])
def app(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Conveyor]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'display.db'}"
    else:
        server = request.getfixturevalue("redis_server")
        url = f"{server.url}?prefix=t{uuid.uuid4().hex[:10]}"
    application = make_app(url)
    yield application
    application.close()


def _run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*argv, "--url", url])
    out, err = capsys.readouterr()
    return code, out, err


def _no_raw_controls(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\r\x9b\u202e"), text


def test_hostile_job_data_is_escaped_in_list_and_show(
        app: Conveyor, capsys: pytest.CaptureFixture[str]) -> None:
    app.enqueue("shop.register", [1, HOSTILE], {"note": HOSTILE})
    failed_id = run_one(app.storage, "default", Outcome.FAILED, message=HOSTILE)
    ref = app.enqueue("shop.register", [2, HOSTILE])
    assert ref is not None
    for argv in (("jobs", "list"), ("jobs", "show", failed_id), ("jobs", "show", ref.id),
                 ("jobs", "list", "--state", "failed")):
        code, out, err = _run(capsys, app.url, *argv)
        assert code == 0, err
        _no_raw_controls(out)
        assert "\\x1b" in out or "\\u001b" in out  # args are shown as (escaped) JSON
    code, out, _ = _run(capsys, app.url, "jobs", "show", failed_id)
    assert f"  message     {ESCAPED}" in out.splitlines()  # the forged newline stays on its line
    code, out, err = _run(capsys, app.url, "jobs", "kill", ref.id)
    assert code == 0 and out == "killed 1 of 1 job(s)\n", err
    code, out, err = _run(capsys, app.url, "jobs", "delete", failed_id, ref.id)
    assert code == 0 and out == "deleted 2 of 2 job(s)\n", err


def _damaged(**fields: Any) -> JobRecord:
    base: dict[str, Any] = dict(
        id="01damaged", name="shop.\x1b[31mregister", queue="default", state=JobState.DEAD,
        payload="{\"a\": [1", message=None, events=[
            Event(ts=1.0, kind=EventKind.MESSAGE, message="logged \ud800 then \x1b[2J")],
        unreadable="job record is not valid JSON: Unterminated string \x1b[0m")
    base.update(fields)
    return JobRecord(**base)


def test_unreadable_record_is_marked_in_the_list() -> None:
    record = _damaged()
    row = list_row(record)
    # the payload that does not decode is shown as its stored text (views.readable)
    assert row["unreadable"] == record.unreadable and row["args"] == ['{"a": [1']
    text = format_list([row], "created_at")
    _no_raw_controls(text)
    [_, line] = text.splitlines()
    assert line.startswith("01damaged  dead   default  shop.\\x1b[31mregister  ")
    assert "UNREADABLE (job record is not valid JSON" in line


def test_unreadable_record_is_marked_in_show() -> None:
    text = format_job(job_view(_damaged()))
    _no_raw_controls(text)
    lines = text.splitlines()
    assert lines[0] == "job 01damaged  shop.\\x1b[31mregister  [dead, UNREADABLE]"
    assert lines[1] == ("  unreadable  job record is not valid JSON: Unterminated string "
                        "\\x1b[0m")
    # the event was built with a lone surrogate, which the text rule stored as U+FFFD
    assert any(line.endswith("logged \ufffd then \\x1b[2J") for line in lines)
    sound = _damaged(unreadable=None, payload='{"a": [1]}')
    assert format_job(job_view(sound)).splitlines()[0].endswith("[dead]")


@pytest.fixture
def damaged_redis(redis_server: Any) -> Iterator[tuple[str, str]]:
    """A Redis store holding one job whose stored record was truncated, and its id."""
    application = make_app(f"{redis_server.url}?prefix=t{uuid.uuid4().hex[:10]}")
    ref = application.enqueue("shop.register", [1, "fine"])
    assert ref is not None
    storage: Any = application.storage
    jobs_key = storage.keys.queue("default").jobs
    storage.link.call("HSET", jobs_key, ref.id, '{"n":"shop.register","q":"def')
    yield application.url, ref.id
    application.close()


@pytest.mark.parametrize("action", ["list", "show", "kill", "delete"])
def test_damaged_redis_record_never_prints_a_traceback(
        damaged_redis: tuple[str, str], action: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, job_id = damaged_redis
    code, _, err = _run(capsys, url, "jobs", action, *([] if action == "list" else [job_id]))
    assert "Traceback" not in err
    assert code == 0 or len(err.splitlines()) == 1, err


def test_damaged_redis_record_is_listed_shown_and_deleted(
        damaged_redis: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url, job_id = damaged_redis
    code, out, err = _run(capsys, url, "jobs", "list")
    assert code == 0 and "UNREADABLE" in out, err
    code, out, err = _run(capsys, url, "jobs", "show", job_id)
    assert code == 0 and "UNREADABLE" in out.splitlines()[0], err
    code, out, err = _run(capsys, url, "jobs", "delete", job_id)
    assert code == 0 and out == "deleted 1 of 1 job(s)\n", err
