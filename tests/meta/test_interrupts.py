"""A suite started in the background by a non-interactive shell (``nohup make test &``, some CI
runners) inherits SIGINT ignored, and so would every command it starts: the tests that stop a
``conveyor web`` or ``conveyor dev broker`` with Ctrl-C, as a user does, then waited for
their timeouts and failed (4 tests, 3.5 minutes, seen on a run of tests/cli started so)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import signal
import subprocess
import sys

def test_a_started_command_is_interrupted_by_sigint():
    code = "import time; print(flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child.stdout.readline()  # started: its KeyboardInterrupt handler is in place
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=30) == -signal.SIGINT  # interrupted, not the 60 s sleep
'''


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job has it


def test_commands_started_by_a_suite_that_inherited_sigint_ignored_get_ctrl_c(
        tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "tests.support.interrupts", "test_probe.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        preexec_fn=_ignore_sigint)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
