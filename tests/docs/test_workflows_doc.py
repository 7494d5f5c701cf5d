"""The ``python`` blocks of docs/workflows.md, run top to bottom against a real worker on
SQLite: the fan-in gets both results, the child after it gets the summary, the workflow
completes and its callback runs once; the canvas, a workflow grown by its running job and a
sub-workflow give the results the page states."""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path
from typing import Any

from conveyor import JobState
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.launcher import Launcher

DOC = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"


def python_blocks() -> list[str]:
    """The page's ``python`` blocks, dedented."""
    found = re.findall(r"^ *```python\n(.*?)^ *```", DOC.read_text(), re.M | re.S)
    return [textwrap.dedent(block) for block in found]


def test_the_workflow_page_runs_as_written(in_tmp: Path) -> None:
    setup, use, canvas, grow, sub, *rest = python_blocks()
    namespace: dict[str, Any] = {"__name__": "docs_workflows"}
    exec(compile(setup, f"{DOC}[1]", "exec"), namespace)
    app = namespace["app"]
    config = WorkerConfig(queues=(QueueWeight("default"),), concurrency=4,
                          heartbeat_interval=0.05, lease=5.0)
    launcher = Launcher(app, config)
    launcher.start()
    try:
        exec(compile(use, f"{DOC}[2]", "exec"), namespace)
        wf = namespace["wf"]
        callback = f"{wf.id}-complete"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            record = app.get_job(callback)
            if record is not None and record.state is JobState.SUCCEEDED:
                break
            time.sleep(0.05)
        status = app.batch_status(wf.id)
        assert status["complete"] and status["counts"]["succeeded"] == 4
        assert status["callbacks_fired"] == ["complete"]
        record = app.get_job(callback)
        assert record is not None and record.state is JobState.SUCCEEDED
        exec(compile(canvas, f"{DOC}[3]", "exec"), namespace)  # its asserts are the checks
        exec(compile(grow, f"{DOC}[4]", "exec"), namespace)
        exec(compile(sub, f"{DOC}[5]", "exec"), namespace)
    finally:
        launcher.stop()
        app.close()
    assert rest == []  # a new block on the page gets its place in this test
