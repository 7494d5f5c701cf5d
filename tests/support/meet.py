"""A meeting point for worker processes, so a test that needs its work shared makes it so.

Which process leases what is the storage's and the scheduler's business: one fast process
may run every job of a test before the others have started. A job that calls ``meet(n)``
blocks until ``n`` processes have called it (each leaves its pid in the folder named by
``CONVEYOR_TEST_MEET``), then never again in that process. Every slot of the first process
blocks on its first jobs, so the jobs left stay pending until the other processes lease them:
the work is shared because the test made it happen, not by chance.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

MEET_ENV = "CONVEYOR_TEST_MEET"
_met = threading.Event()


def meet(count: int, timeout: float = 60.0) -> None:
    """Block until ``count`` processes have called ``meet`` (bounded by ``timeout``: a test
    whose processes never all come fails on its own assertion, it does not hang)."""
    where = os.environ.get(MEET_ENV)
    if not where or count <= 1 or _met.is_set():
        return
    folder = Path(where)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list(folder.iterdir())) >= count:
            _met.set()
            return
        time.sleep(0.005)
