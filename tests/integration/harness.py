"""Real ``conveyor worker`` subprocesses on a SQLite file, and the run log the jobs write."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.integration.apps.runs import RUNS_ENV
from tests.support.meet import MEET_ENV

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.apps.runs:app"


def until(check: Callable[[], bool], timeout: float = 20.0, step: float = 0.05) -> bool:
    """Poll ``check`` until true or ``timeout``; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


class Worker:
    """One ``conveyor worker`` process (its own session, so teardown can kill the group)."""

    def __init__(self, url: str, tmp: Path, *args: str, name: str = "worker",
                 app: str = APP) -> None:
        self.log_path = tmp / f"{name}.log"
        env = dict(os.environ, **{RUNS_ENV: str(tmp / "runs.txt"), MEET_ENV: str(tmp / "meet")})
        env.pop("CONVEYOR_URL", None)
        # One process unless the test asks for more: alone, ``conveyor worker`` runs one per core.
        count = [] if "--processes" in args else ["--processes", "1"]
        cmd = [sys.executable, "-m", "conveyor.cli.main", "worker", app, "--url", url, *count,
               *args]
        with self.log_path.open("ab") as out:
            self.popen = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out,
                                          start_new_session=True)

    @property
    def pid(self) -> int:
        """The worker's (or supervisor's) pid."""
        return self.popen.pid

    def log(self) -> str:
        """Everything the worker wrote so far."""
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        """Send a signal to the worker process itself."""
        self.popen.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the exit code."""
        return self.popen.wait(timeout)

    def children(self) -> list[int]:
        """Pids of the processes the worker forked (``--processes``)."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        with contextlib.suppress(OSError):
            return [int(p) for p in path.read_text().split()]
        return []

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait until the worker (every process of it) logged its start line."""
        assert until(lambda: "starting:" in self.log(), timeout), self.log()

    def kill_group(self) -> None:
        """Teardown: SIGKILL the worker and everything it forked."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)


def runs(tmp: Path) -> Counter[str]:
    """How many times each job id ran, from the run log."""
    path = tmp / "runs.txt"
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines() if line.strip())
