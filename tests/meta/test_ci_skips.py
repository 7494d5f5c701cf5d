"""The CI skip gate: under CI=true an unexpected skip fails the run, an allowed one does not;
and a backend whose import is broken is an error in the conformance suite, not a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import pytest

def test_unexpected() -> None:
    pytest.skip("conveyor.storage.redis cannot be imported")

@pytest.mark.skipif(True, reason="root can write anywhere")
def test_allowed() -> None: ...

def test_runs() -> None: ...
'''


def _pytest(tmp_path: Path, ci: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-p", "tests.support.ci_skips", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_ci_fails_on_unexpected_skips_only(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    local = _pytest(tmp_path, None, "test_probe.py")
    assert local.returncode == 0 and "1 passed, 2 skipped" in local.stdout, local.stdout
    ci = _pytest(tmp_path, "true", "test_probe.py")
    assert ci.returncode == 1, ci.stdout
    assert "1 failed, 1 passed, 1 skipped" in ci.stdout
    assert "unexpected skip in CI: conveyor.storage.redis cannot be imported" in ci.stdout


def test_a_broken_backend_import_is_an_error_not_a_skip(tmp_path: Path) -> None:
    # A sitecustomize that breaks the Redis engine's import, as a bad refactor would.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['conveyor.storage.redis'] = None\n")
    env_path = f"{tmp_path}{os.pathsep}{ROOT}"
    env = {**{k: v for k, v in os.environ.items() if k != "CI"}, "PYTHONPATH": env_path}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "tests/conformance/test_open.py", "-k", "redis and not cluster", "-x"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "skipped" not in proc.stdout.splitlines()[-1]
    assert "failed" in proc.stdout.splitlines()[-1] or "error" in proc.stdout.splitlines()[-1]
