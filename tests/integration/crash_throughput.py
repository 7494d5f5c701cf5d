"""Throughput around a ``kill -9`` of one worker process (not a test: it prints figures).

    python -m tests.integration.crash_throughput sqlite   # or: redis

Starts ``conveyor worker --processes 2 -c 10`` (20 slots) on a fresh store with jobs of
500 ms, kills one child with SIGKILL, queues more work behind the recovered jobs once they are
back, and prints the busy slots (finished jobs per second x 0.5 s) before the kill and in the
8 s after the recovered jobs were put back: what isolating them costs the rest of the fleet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from conveyor import Conveyor, JobState
from tests.integration.apps.runs import register
from tests.integration.harness import Worker
from tests.integration.throughput import storage_url

JOB_MS = 500


def busy_slots(app: Conveyor, seconds: float) -> float:
    """Mean busy slots over ``seconds``: jobs finished in that time x job duration."""
    done = app.storage.count_jobs(state=JobState.SUCCEEDED)
    time.sleep(seconds)
    finished = app.storage.count_jobs(state=JobState.SUCCEEDED) - done
    return finished * JOB_MS / 1000 / seconds


def main(kind: str) -> None:
    """Run the scenario on ``kind`` storage and print the figures."""
    with storage_url(kind) as url, tempfile.TemporaryDirectory() as tmp:
        app = Conveyor(url)
        register(app)
        work = app.registry.get("work")
        assert work is not None
        work.enqueue_many([(JOB_MS,)] * 260)
        worker = Worker(url, Path(tmp), "-c", "10", "--processes", "2", "--lease", "2")
        try:
            worker.wait_ready()
            time.sleep(2)
            before = busy_slots(app, 3)
            os.kill(worker.children()[0], signal.SIGKILL)
            # Recovered jobs go behind the backlog on SQLite: once they are back, queue more
            # work behind them, so they run while every slot has something to do.
            while not any(r.recoveries for r in app.storage.list_jobs(
                    state=JobState.PENDING, limit=10_000)):
                time.sleep(0.05)
            work.enqueue_many([(JOB_MS,)] * 1000)
            after = busy_slots(app, 8)
            recovered = [r for r in app.storage.list_jobs(limit=10_000) if r.recoveries]
            print(f"{kind}: busy slots of 20 — before the kill {before:.1f}; 8 s after the "
                  f"recovery {after:.1f}; recovered jobs {len(recovered)}, succeeded "
                  f"{sum(r.state is JobState.SUCCEEDED for r in recovered)}")
        finally:
            with contextlib.suppress(Exception):
                worker.kill_group()
            app.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sqlite")
