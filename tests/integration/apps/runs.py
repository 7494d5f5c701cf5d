"""Jobs the worker integration tests run inside real ``conveyor worker`` processes.

Each run appends ``<job id> <pid>`` to the file named by ``CONVEYOR_TEST_RUNS`` with one
``write`` on an ``O_APPEND`` descriptor (Linux keeps such short lines whole), so a test counts
executions per job across processes, including ones killed half-way.

Workers load ``tests.integration.apps.runs:app`` with ``--url``; tests enqueue with their own
app on the same URL, calling ``register`` so the job names match.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from conveyor import Conveyor, current_job
from tests.support.meet import meet

RUNS_ENV = "CONVEYOR_TEST_RUNS"


def _record() -> None:
    path = os.environ.get(RUNS_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{current_job().job_id} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def register(app: Conveyor) -> None:
    """Register the test jobs on ``app`` under stable names."""

    @app.job(name="work")
    def work(ms: float = 0.0, processes: int = 0) -> int:
        """Sleep ``ms`` milliseconds, then record the run (first, with ``processes``, wait
        until that many worker processes have started one: ``tests.support.meet``)."""
        meet(processes)
        if ms:
            time.sleep(ms / 1000.0)
        _record()
        return os.getpid()

    @app.job(name="hold")
    def hold(release_file: str, max_seconds: float = 60.0) -> str:
        """Block until ``release_file`` exists (bounded), then record the run."""
        deadline = time.monotonic() + max_seconds
        while not Path(release_file).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        _record()
        return "released"


app = Conveyor()
register(app)
