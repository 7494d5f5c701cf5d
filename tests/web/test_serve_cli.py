"""``conveyor web`` / ``conveyor metrics`` refuse to expose themselves without a strong token."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor.cli.serve import read_token
from conveyor.errors import ConveyorError


def _conveyor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conveyor.cli.main", *args], text=True,
                          capture_output=True, timeout=60, env=env)


@pytest.mark.parametrize(("command", "extra", "says"), [
    ("web", [], "without a token"),
    ("web", ["--token", "x"], "1-character token"),
    ("metrics", [], "without a token"),
    ("metrics", ["--token", "short-token"], "11-character token"),
    ("web", ["--token-file", "/nonexistent/token"], "cannot read the token file"),
])
def test_public_bind_needs_a_strong_token(tmp_path: Path, command: str, extra: list[str],
                                          says: str) -> None:
    proc = _conveyor(command, "--host", "0.0.0.0", "--port", "0", "--url",
                     f"sqlite:///{tmp_path / 'c.db'}", *extra)
    assert proc.returncode == 2 and says in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_token_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text("from-the-file-0123456789\n")
    monkeypatch.setenv("CONVEYOR_WEB_TOKEN", "from-the-environment")
    args = argparse.Namespace(token_file=str(path), token="from-the-flag")
    assert read_token(args, "CONVEYOR_WEB_TOKEN") == "from-the-file-0123456789"
    args.token_file = None
    assert read_token(args, "CONVEYOR_WEB_TOKEN") == "from-the-flag"
    args.token = None
    assert read_token(args, "CONVEYOR_WEB_TOKEN") == "from-the-environment"
    path.write_text("\n")
    with pytest.raises(ConveyorError, match="is empty"):
        read_token(argparse.Namespace(token_file=str(path), token=None), "X")
