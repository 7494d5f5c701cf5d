"""``--stores`` (make check's choice of stores): a test of another store is deselected, whether
a parameter names it (alone or paired with a broker) or it asks for its server; a test that
needs no store always runs; an unknown name is a usage error, not an empty run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import pytest

@pytest.fixture(params=["memory", "postgres", "redis_cluster"])
def backend(request):
    return request.param

@pytest.fixture
def postgres_server():
    return "a server"

def test_each(backend): ...

@pytest.mark.parametrize("pair", [("sqlite", "amqp"), ("redis_sentinel", "memory")],
                         ids=["sqlite+amqp", "sentinel+memory"])
def test_pair(pair): ...

@pytest.mark.parametrize("url", ["redis_server", "cluster"])
def test_alias(url): ...

def test_server(postgres_server): ...

@pytest.mark.parametrize("word", ["memo", "sql"])
def test_no_store(word): ...
'''


def _collect(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests.support.store_choice", "test_probe.py", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


def _ids(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line]


def test_only_the_chosen_stores_tests_and_the_storeless_ones_are_kept(tmp_path: Path) -> None:
    chosen = _collect(tmp_path, "--stores=memory,sqlite,redis")
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    assert _ids(chosen) == ["test_each[memory]", "test_pair[sqlite+amqp]",
                            "test_alias[redis_server]", "test_no_store[memo]",
                            "test_no_store[sql]"]
    assert "5/10 tests collected (5 deselected)" in chosen.stdout
    assert len(_ids(_collect(tmp_path))) == 10  # without the option, every test


def test_an_unknown_store_is_a_usage_error(tmp_path: Path) -> None:
    wrong = _collect(tmp_path, "--stores=memory,mysql")
    assert wrong.returncode == 4
    assert "--stores: unknown store mysql" in wrong.stderr
