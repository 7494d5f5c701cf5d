"""Django's tasks contract on conveyor, as the django-tasks backport's own tests state it
(``RealOrangeOne/django-tasks``: tests/tests/test_immediate_backend.py, and the database
backend's test_database_backend.py before it moved out), with a real worker on SQLite,
Redis and PostgreSQL; plus issue 50's silent cases and issue 49's runner rule (a stored path
that is not a task is never imported and ends ``dead`` with the reason). The project's
scripts run in subprocesses: Django is configured once per process."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

from tests.conformance.backends import backend_url
from tests.contrib.django_run import beside_worker, project_env

SIDE_EFFECT = "open({mark!r}, 'w').write('imported')\nx = 1\n"


@pytest.fixture(scope="module", params=["sqlite", "redis", "postgres"])
def seen(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``tests/contrib/django_project/fidelity.py`` saw, beside a real worker."""
    tmp = tmp_path_factory.mktemp(f"django-{request.param}")
    (tmp / "other").mkdir()
    mark = tmp / "imported.txt"
    (tmp / "sideeffect_mod.py").write_text(SIDE_EFFECT.format(mark=str(mark)))
    env = project_env(tmp, backend_url(request.param, tmp, request.getfixturevalue), tmp,
                      CONVEYOR_OTHER_URL=backend_url(request.param, tmp / "other",
                                                     request.getfixturevalue))
    out = beside_worker("fidelity", env, tmp)  # sideeffect_mod importable: tmp is on the path
    out["imported_by_worker"] = mark.exists()
    signals: dict[str, list[Any]] = defaultdict(list)
    for line in (tmp / "sig").read_text().splitlines():
        kind, job_id, status, errors = json.loads(line)
        signals[job_id].append([kind, status, errors])
    out["signals"] = signals
    return out


def test_enqueue_returns_ready_and_get_result_reads_it_back(seen: dict[str, Any]) -> None:
    """django-tasks test_database_backend.py::test_enqueue_task (READY, attempts 0, args and
    kwargs as given, ``return_value`` raises "Task has not finished yet") and ::test_get_result
    (the result read back equals the one enqueue returned, task included). The job is named
    after the task's module path, which the dashboard filters by (issue 50)."""
    assert seen["enqueue"] == {
        "status": "READY", "attempts": 0, "args": [1], "kwargs": {"two": 3},
        "return_value": ["ValueError", "Task has not finished yet"],
        "fetched_equal": True, "task_equal": True,
        "stored_name": "tests.contrib.django_project.tasks.noop_task"}


def test_get_result_keeps_the_options_the_task_was_enqueued_with(seen: dict[str, Any]) -> None:
    """Issue 50: ``get_result`` rebuilt ``result.task`` without its queue, ``run_after`` and
    backend, so ``refresh()`` of a task enqueued with ``using(backend="other")`` asked the
    default backend and raised ``TaskResultDoesNotExist``."""
    assert seen["deferred"] == {"queue": "idle", "run_after": True, "backend": "default"}
    other = seen["other"]
    assert (other["backend"], other["refresh"]) == ("other", [])
    assert other["on_default"][0] == "TaskResultDoesNotExist"  # two stores indeed


def test_missing_and_mismatched_results(seen: dict[str, Any]) -> None:
    """django-tasks ::test_get_missing_result, ::test_invalid_uuid (``TaskResultDoesNotExist``
    for an id that cannot exist) and base.py's ``TaskResultMismatch``; issue 49:
    ``get_result("\\ud800")`` raised a raw encoding error."""
    assert seen["mismatch"][0] == "TaskResultMismatch"
    assert [m[0] for m in seen["missing"]] == ["TaskResultDoesNotExist"] * 4


def test_what_django_refuses_at_enqueue_stores_nothing(seen: dict[str, Any]) -> None:
    """Django normalizes arguments (django-tasks utils.normalize_json: ``TypeError``
    "Unsupported type" for what is not JSON, ``bytes`` read as UTF-8, ``ValueError`` when they
    are not); issue 50 found ``PayloadError`` (a ``ValueError``) and ``bytes`` refused, and no
    check of the call itself. ``validate_task`` refuses a queue not configured
    (test_immediate_backend.py::test_validate_on_enqueue) and a priority out of Django's
    range (-100..100: django-tasks' ::test_invalid_priority)."""
    refused = seen["refused"]
    assert refused["set"][0] == "TypeError" and "Unsupported type" in refused["set"][1]
    assert refused["object"][0] == "TypeError"
    assert refused["bad_bytes"][0] == "ValueError"
    assert refused["arity"][0] == "TypeError" and "too many positional" in refused["arity"][1]
    assert refused["keyword"][0] == "TypeError" and "unexpected keyword" in refused["keyword"][1]
    assert refused["priority"][0] == "InvalidTaskError"
    assert refused["queue"] == ["InvalidTaskError", "Queue 'nowhere' is not valid for backend."]
    assert seen["stored_after_refusals"] == 0


def test_priority_reaches_the_queue_s_lineup(seen: dict[str, Any]) -> None:
    """Django's ``priority`` (``supports_priority``, issue 54: it was refused): stored with
    the task, read back by ``get_result``, and the fetch of its queue weighs it (the
    explanation of the low one names the jobs of higher priority ahead of it; nothing of
    higher priority is ahead of the high one)."""
    priority = seen["priority"]
    assert priority["task"] == [-5, 50]
    assert "priority" in priority["low_gates"]
    assert "priority" not in priority["high_gates"]


def test_a_raising_task_fails_after_one_attempt(seen: dict[str, Any]) -> None:
    """django-tasks ::test_failing_task / test_immediate_backend.py::test_catches_exception
    (FAILED, the exception class and a traceback ending in its line, SystemExit too, the
    worker survives: ::test_worker_doesnt_exit) and ::test_complex_exception. Issue 50: a
    raising task read ``READY`` with 24 retries left over about 25 days."""
    value_error = seen["value_error"]
    assert value_error["status"] == "FAILED" and value_error["attempts"] == 1
    assert value_error["state"] == "dead"
    assert value_error["errors"] == ["builtins.ValueError"]
    assert value_error["traceback_end"] == ["ValueError: This task failed due to ValueError"]
    assert seen["system_exit"]["status"] == "FAILED"
    assert seen["system_exit"]["errors"] == ["builtins.SystemExit"]
    assert seen["complex_exception"]["errors"] == ["builtins.ValueError"]


def test_task_finished_carries_the_attempts_error(seen: dict[str, Any]) -> None:
    """Issue 50: ``task_finished`` for a failed attempt carried ``errors == []``; Django's
    backends append the attempt's ``TaskError`` before sending it."""
    failed_id = seen["value_error"]["task_id"]
    assert seen["signals"][failed_id] == [
        ["enqueued", "READY", []], ["started", "RUNNING", []],
        ["finished", "FAILED", ["builtins.ValueError"]]]


def test_a_result_that_is_not_json_fails_with_its_full_traceback(seen: dict[str, Any]) -> None:
    """django-tasks test_immediate_backend.py::test_complex_return_value (FAILED, TypeError,
    "Unsupported type" in the traceback); issue 50: a one-line traceback."""
    result = seen["complex_return"]
    assert result["status"] == "FAILED" and result["errors"] == ["builtins.TypeError"]
    assert "Unsupported type" in result["traceback_end"][0]
    assert result["traceback_lines"][0] > 3


def test_results_context_and_normalized_arguments(seen: dict[str, Any]) -> None:
    """django-tasks ::test_result (42), ::test_takes_context (the context's result id is the
    task's) and ::test_context (attempt 1); ``bytes`` reach the task as the text Django
    normalizes them to, a tuple as a list."""
    assert seen["meaning"]["value"] == 42 and seen["meaning"]["attempts"] == 1
    assert seen["task_id"]["value"] == seen["task_id"]["task_id"]
    assert seen["context"]["status"] == "SUCCESSFUL"
    assert seen["bytes"]["value"] == ["str", "café"]
    assert seen["tuple"]["value"] == ["list", [1, 2]]


def test_the_worker_runs_only_the_projects_tasks(seen: dict[str, Any]) -> None:
    """Issue 49: the runner imported any module path written in a job (``sideeffect_mod.x``
    ran that module's top-level code), and ``get_result`` imported on the web side too.
    django-tasks test_database_backend.py::test_invalid_task_path: a path that is not a task
    ends failed and never runs. Here each ends ``dead`` with the reason, nothing outside the
    project is imported on either side, and none reads as a task result."""
    for key in ("outside", "stdlib", "not_a_task", "legacy"):
        state, message, read = seen["forged"][key]
        assert state == "dead", (key, message)
        assert "is not a Django task" in message, (key, message)
        assert read[0] == "TaskResultDoesNotExist", key
    assert seen["imported_by_worker"] is False
    assert seen["imported_here"] is False


def test_a_job_stored_before_tasks_were_named_by_path_still_runs(seen: dict[str, Any]) -> None:
    """Jobs stored as ``conveyor.django`` (the task's path their first argument) before
    issue 50 named them by path: a worker of this release runs and reads them."""
    assert seen["legacy_ok"] == ["SUCCESSFUL", 5, [2, 3], "default"]
