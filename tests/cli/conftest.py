"""A seeded SQLite store per test, and helpers to run ``conveyor`` in and out of process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from conveyor import Conveyor
from conveyor.cli.main import main
from tests.web.seed import Seeded, make_app, seed

ROOT = Path(__file__).resolve().parents[2]


class Env:
    """A seeded store and ways to run the CLI against it."""

    def __init__(self, url: str, app: Conveyor, seeded: Seeded,
                 capsys: pytest.CaptureFixture[str]) -> None:
        self.url, self.app, self.seeded, self._capsys = url, app, seeded, capsys

    def run(self, *argv: str) -> tuple[int, str, str]:
        """``main([...])`` in this process with ``--url``; returns (code, stdout, stderr)."""
        self._capsys.readouterr()
        code = main([*argv, "--url", self.url])
        out, err = self._capsys.readouterr()
        return code, out, err

    def json(self, *argv: str) -> Any:
        """Run a read command with ``--json`` and parse its output."""
        code, out, err = self.run(*argv, "--json")
        assert code == 0, err
        return json.loads(out)

    def state(self, key: str) -> str:
        """The stored state of a seeded job."""
        record = self.app.storage.get_job(self.seeded.ids[key])
        return record.state.value if record else "gone"


@pytest.fixture
def env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Env]:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    app = make_app(url)
    yield Env(url, app, seed(app), capsys)
    app.close()


def without_store(err: str) -> str:
    """stderr without the line naming the store a command opened (``conveyor: store …``),
    which every command prints before its own output or error."""
    return "".join(line for line in err.splitlines(keepends=True)
                   if not line.startswith("conveyor: store "))


def lines_until(stream: IO[str], words: str, timeout: float = 90) -> list[str]:
    """The lines a process writes to ``stream`` up to the first holding ``words``; fails
    the test when the stream ends first or after ``timeout`` seconds."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while not lines or words not in lines[-1]:
        line = stream.readline()
        assert line and time.monotonic() < deadline, f"no {words!r} in: {''.join(lines)}"
        lines.append(line)
    return lines


def conveyor(*argv: str, url: str, timeout: float = 60,
             **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``python -m conveyor.cli.main`` as a real subprocess with ``CONVEYOR_URL``."""
    environ = {**os.environ, "CONVEYOR_URL": url, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "conveyor.cli.main", *argv], env=environ,
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kwargs)
