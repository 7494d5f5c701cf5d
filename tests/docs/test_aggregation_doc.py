"""The ``python`` block of docs/aggregation.md, run as written against a real worker on
SQLite: the four calls are one run of the aggregator, three members succeed with its return
value and the fourth fails with the reason the aggregator gave it."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from conveyor import JobState
from conveyor.worker.config import QueueWeight, WorkerConfig
from conveyor.worker.launcher import Launcher

DOC = Path(__file__).resolve().parents[2] / "docs" / "aggregation.md"


def test_the_aggregation_page_runs_as_written(in_tmp: Path) -> None:
    [block] = [textwrap.dedent(b) for b in re.findall(r"^ *```python\n(.*?)^ *```",
                                                      DOC.read_text(), re.M | re.S)]
    setup, use = block.split("refs = ", 1)
    namespace: dict[str, Any] = {"__name__": "docs_aggregation"}
    exec(compile(setup, f"{DOC}[setup]", "exec"), namespace)
    app = namespace["app"]
    config = WorkerConfig(queues=(QueueWeight("default"),), concurrency=2,
                          heartbeat_interval=0.05, poll_interval=(0.05, 0.1), lease=5.0)
    launcher = Launcher(app, config)
    launcher.start()
    try:
        exec(compile("refs = " + use, f"{DOC}[use]", "exec"), namespace)  # its asserts
        refs = namespace["refs"]
        records = [app.get_job(r.id) for r in refs]
        assert [r.state for r in records] == [JobState.SUCCEEDED] * 3 + [JobState.FAILED]
        leads = {e.data["lead"] for r in records[1:] for e in r.events
                 if e.kind == "started" and e.data}
        assert leads == {refs[0].id}  # one run took all four
    finally:
        launcher.stop()
        app.close()
