"""Django's tasks API on conveyor, in a real project (``tests/contrib/django_project``) on
SQLite and Redis: the check script enqueues through ``Task.enqueue`` / ``aenqueue`` /
``using(run_after=...)`` and ``transaction.on_commit``, while the worker runs as the docs say:
``DJANGO_SETTINGS_MODULE=... conveyor worker conveyor.contrib.django_tasks:app``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conformance.backends import backend_url
from tests.contrib.django_run import ROOT, beside_worker, project_env


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_django_project_runs_its_tasks_on_conveyor(store: str, tmp_path: Path,
                                                     request: pytest.FixtureRequest) -> None:
    env = project_env(tmp_path, backend_url(store, tmp_path, request.getfixturevalue))
    seen = beside_worker("check", env, tmp_path, timeout=90)
    assert seen["status_at_enqueue"] == "READY"
    ok = {"status": "SUCCESSFUL", "errors": [], "times": [True, True, True]}
    assert seen["added"] == {**ok, "attempts": 1, "value": 5, "worker_ids": 1}
    assert seen["async"] == {**ok, "attempts": 1, "value": 42, "worker_ids": 1}
    assert seen["committed"] == {**ok, "attempts": 1, "value": 8, "worker_ids": 1}
    assert "rolled" not in seen  # rolled back: never enqueued
    assert seen["later"]["value"] == 2
    assert seen["later_waited"] >= 0.99  # never started before its run_after
    assert seen["flaky"] == {**ok, "attempts": 2, "value": 2, "worker_ids": 2}
    assert seen["broken"] == {"status": "FAILED", "attempts": 1, "value": None,
                              "worker_ids": 1, "times": [True, True, True],
                              "errors": [["ValueError", "ValueError: bad template"]]}
    assert seen["unique"] is True  # job_options(unique_for=...): one job for both
    assert seen["batch"] == 3  # enqueued inside the backend's app.batch(): counted there
    assert [seen[f"sum{n}"]["value"] for n in range(3)] == [0, 2, 4]
    signals: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for line in (tmp_path / "sig").read_text().splitlines():
        kind, job_id, status, _ = json.loads(line)
        signals[job_id].append((kind, status))
    flaky_id = [k for k, v in signals.items() if len(v) == 5]
    assert len(flaky_id) == 1, signals  # enqueued, then started + finished per attempt
    assert signals[flaky_id[0]] == [("enqueued", "READY"), ("started", "RUNNING"),
                                    ("finished", "FAILED"), ("started", "RUNNING"),
                                    ("finished", "SUCCESSFUL")]


@pytest.mark.parametrize("store", ["sqlite"])
def test_enqueue_returns_ready_even_if_a_worker_started_the_task_already(
        store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Found by CI on Redis, where an idle worker leases a job one round trip after it is
    stored: ``enqueue`` read the job back and returned ``RUNNING``. Django's contract (and
    this backend's docstring) is ``READY``: what was enqueued, ``refresh()`` for news."""
    env = project_env(tmp_path, backend_url(store, tmp_path, request.getfixturevalue))
    run = subprocess.run([sys.executable, "-m", "tests.contrib.django_project.race"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout)
    assert seen["stored"] == "active"  # the race was really run: a worker holds it
    assert (seen["returned"], seen["signal"]) == ("READY", ["READY"])
