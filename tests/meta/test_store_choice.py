"""``--stores`` (make check's choice of stores): a test of another store is deselected, whether
a parameter names it (alone or paired with a broker) or it asks for its server; a test that
needs no store always runs; one that reaches another store's server in a way collection
cannot see fails, saying so; an unknown name is a usage error, not an empty run."""

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

HIDDEN = '''
import pytest

@pytest.fixture(scope="session")
def redis_sentinel():
    return "a server"

def test_hidden(request):
    request.getfixturevalue("redis_sentinel")
'''


def _pytest(tmp_path: Path, probe: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(probe)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "tests.support.store_choice", "test_probe.py", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


def _collect(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _pytest(tmp_path, PROBE, "--collect-only", *args)


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


def test_a_server_reached_unseen_fails_naming_the_store(tmp_path: Path) -> None:
    """``request.getfixturevalue`` inside the test: collection cannot see it, so the short
    loop would start a Sentinel group it promises not to start."""
    hidden = _pytest(tmp_path, HIDDEN, "--stores=memory,sqlite,redis")
    assert hidden.returncode == 1, hidden.stdout
    assert "1 failed" in hidden.stdout
    assert "redis_sentinel's server under --stores=memory,redis,sqlite" in hidden.stdout
    assert _pytest(tmp_path, HIDDEN).returncode == 0  # without the option it runs
