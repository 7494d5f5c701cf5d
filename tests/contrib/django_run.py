"""Running the test Django project (``tests/contrib/django_project``): its scripts beside a
real ``conveyor worker`` started as docs/django.md says, each in a process of its own
(Django is configured once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONVEYOR = Path(sys.executable).with_name("conveyor")


def project_env(tmp: Path, url: str, *paths: Path, **extra: str) -> dict[str, str]:
    """The environment of the project's processes: its settings, database, signal log and
    conveyor store (``extra`` adds variables; ``paths`` join ``PYTHONPATH``)."""
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.contrib.django_project.settings",
            "DJANGO_TEST_DB": str(tmp / "django.db"), "SIGNAL_LOG": str(tmp / "sig"),
            "CONVEYOR_URL": url, **extra,
            "PYTHONPATH": os.pathsep.join(str(p) for p in (ROOT, *paths))}


def beside_worker(script: str, env: dict[str, str], tmp: Path,
                  timeout: float = 120) -> dict[str, Any]:
    """Run ``tests.contrib.django_project.<script>`` while a worker serves the queues
    ``default`` and ``mail``; what the script printed (JSON)."""
    worker = subprocess.Popen(
        [str(CONVEYOR), "worker", "conveyor.contrib.django_tasks:app", "--processes", "1",
         "-c", "4", "-q", "default", "-q", "mail"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=open(tmp / "worker.log", "w"))  # noqa: SIM115
    try:
        check = subprocess.run([sys.executable, "-m", f"tests.contrib.django_project.{script}"],
                               cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=timeout)
    finally:
        worker.terminate()
        worker.wait(30)
    assert check.returncode == 0, check.stderr[-3000:]
    out: dict[str, Any] = json.loads(check.stdout)
    return out
