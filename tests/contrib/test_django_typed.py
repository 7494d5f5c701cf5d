"""Typed arguments through Django's tasks API on conveyor (docs/job-data.md): a task's
pydantic-model and dataclass parameters are validated at ``Task.enqueue`` (a wrong field
raises ``TypeError`` naming it, nothing stored), stored as JSON, arrive typed in the task,
and its typed return comes back typed from ``get_result``.

Expectation from Celery 5.5's ``pydantic=True`` tasks and django-tasks' contract that
arguments must round-trip through JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.backends import backend_url
from tests.contrib.django_run import ROOT, project_env


def test_a_django_task_takes_and_returns_typed_values(tmp_path: Path,
                                                      request: pytest.FixtureRequest) -> None:
    env = project_env(tmp_path, backend_url("sqlite", tmp_path, request.getfixturevalue))
    run = subprocess.run([sys.executable, "-m", "tests.contrib.django_project.typed"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["stored_args"] == [{"x": 1.0, "y": 2.0, "label": "home"}]
    assert seen["status"] == "SUCCESSFUL", seen["errors"]
    assert seen["value"] == "Route(points=[Point(x=1.0, y=2.0, label='home')], mode='bike')"
    assert "argument 'start': field x" in seen["refused"] and "\n" not in seen["refused"]
