"""Tools the fault scenarios share: real worker subprocesses, the execution log, waiting
without fixed sleeps, and the figures each scenario measures (printed after the run).

Nothing here mocks conveyor: workers are ``conveyor worker`` processes, signals are real.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_until

__all__ = ["wait_until"]  # re-exported: the scenarios import it from here

REPO = Path(__file__).resolve().parents[2]
APP_REF = "tests.faults.apps.chaos:app"
LOG_ENV = "CONVEYOR_FAULTS_LOG"



def conveyor_command() -> list[str]:
    """The installed ``conveyor`` console script next to this interpreter, else ``-m``."""
    script = Path(sys.executable).parent / "conveyor"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "conveyor.cli.main"]


@dataclass
class WorkerProc:
    """One ``conveyor worker`` subprocess, in its own session so its children die with it."""

    url: str
    log_dir: Path
    env: dict[str, str]
    concurrency: int = 4
    lease: float | None = None
    timeout: float | None = None
    # Always passed: ``conveyor worker`` alone runs one process per core, and the suite's
    # scenarios count their processes. 1 is a single process without a supervisor.
    processes: int = 1
    queues: Sequence[str] = ("default",)
    prefix: Sequence[str] = ()
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    name: str = "worker"
    app_ref: str = APP_REF
    args: Sequence[str] = ()  # more ``conveyor worker`` flags

    def start(self) -> WorkerProc:
        """Launch the worker; output goes to ``<log_dir>/<name>.out``."""
        cmd = [*self.prefix, *conveyor_command(), "worker", self.app_ref,
               "-c", str(self.concurrency), "--processes", str(self.processes), "--url", self.url]
        for queue in self.queues:
            cmd += ["-q", queue]
        if self.lease is not None:
            cmd += ["--lease", str(self.lease)]
        if self.timeout is not None:
            cmd += ["--timeout", str(self.timeout)]
        cmd += self.args
        out = open(self.output_path, "ab")  # noqa: SIM115 - the child holds it for its lifetime
        env = {**os.environ, **self.env, "CONVEYOR_URL": self.url}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self.popen = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        out.close()
        self.started_at = time.time()
        return self

    @property
    def output_path(self) -> Path:
        """Where the worker's stdout and stderr go."""
        return self.log_dir / f"{self.name}.out"

    @property
    def output(self) -> str:
        """Everything the worker printed so far."""
        try:
            return self.output_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def pid(self) -> int:
        """The worker (or supervisor) process id."""
        assert self.popen is not None, "worker not started"
        return self.popen.pid

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.popen is not None and self.popen.poll() is None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the worker process itself (not its children)."""
        os.kill(self.pid, signum)

    def kill9(self) -> float:
        """SIGKILL the worker; returns the wall-clock time of the kill."""
        when = time.time()
        self.signal(signal.SIGKILL)
        assert self.popen is not None
        self.popen.wait(timeout=10)
        return when

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit by itself; fail the test if it does not."""
        assert self.popen is not None
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{self.name} did not exit within {timeout}s") from exc

    def children(self) -> list[int]:
        """Pids of the worker's direct children (the forked processes under ``--processes``)."""
        return child_pids(self.pid)

    def cleanup(self) -> None:
        """Kill the worker's whole process group if it is still there (test teardown)."""
        if self.popen is None:
            return
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid``, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may hold spaces.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def process_state(pid: int) -> str:
    """The one-letter /proc state of a process ('T' when stopped), '' when it is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


@dataclass
class Execution:
    """One run of one job, assembled from its ``start`` and ``end`` lines."""

    job_id: str
    attempt: int
    pid: int
    started: float
    ended: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ExecLog:
    """Reads the shared execution log the chaos jobs append to."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[dict[str, Any]]:
        """Every complete line written so far."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    def executions(self) -> dict[str, list[Execution]]:
        """Executions per job id, in start order."""
        runs: dict[str, list[Execution]] = defaultdict(list)
        open_runs: dict[tuple[str, int, int], Execution] = {}
        for line in self.lines():
            key = (line["j"], line["a"], line["p"])
            if line["s"] == "start":
                run = Execution(line["j"], line["a"], line["p"], line["t"], extra=line)
                runs[line["j"]].append(run)
                open_runs[key] = run
            elif line["s"] == "end" and key in open_runs:
                open_runs[key].ended = line["t"]
        return dict(runs)

    def starts(self) -> int:
        """How many executions have started."""
        return sum(1 for line in self.lines() if line["s"] == "start")

    def first_start_after(self, when: float) -> float | None:
        """Time of the first execution that started after ``when``."""
        times = [line["t"] for line in self.lines() if line["s"] == "start" and line["t"] > when]
        return min(times) if times else None


@dataclass
class Figure:
    """One measured result of one scenario, printed in the session summary."""

    scenario: str
    backend: str
    values: dict[str, Any]


FIGURES: list[Figure] = []


def report(scenario: str, backend: str, **values: Any) -> None:
    """Record figures for the summary table (and print them at once under ``-s``)."""
    rounded = {k: round(v, 2) if isinstance(v, float) else v for k, v in values.items()}
    FIGURES.append(Figure(scenario, backend, rounded))
    values_text = ", ".join(f"{k}={v}" for k, v in rounded.items())
    print(f"\n[faults] {scenario} [{backend}]: {values_text}")


def summary_lines() -> Iterator[str]:
    """The figures table, one line per scenario run."""
    for fig in FIGURES:
        values = ", ".join(f"{k}={v}" for k, v in fig.values.items())
        yield f"{fig.scenario:<34} {fig.backend:<14} {values}"
