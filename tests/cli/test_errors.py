"""Every CLI error is one line on stderr and a non-zero exit, never a traceback.

Each case below printed a traceback and exited 1 before; they run ``main([...])`` in this
process against real storage (a SQLite file, the session's redis-server, a TCP listener that
answers garbage) and check the exact line.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redis
from conveyor.cli import stats
from conveyor.cli.main import main
from conveyor.core.job import JobSpec
from conveyor.storage import open_storage
from tests.cli.conftest import ROOT, Env, conveyor, without_store
from tests.support.redis_server import free_port


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """The error, one line; the line naming the store a command opened (printed before the
    command ran, so before its error) is not part of it."""
    lines = without_store(err).splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("conveyor: "), err
    assert "Traceback" not in err
    return lines[0]


def test_port_that_is_not_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "stats", "--url", "redis://:pw@127.0.0.1:notaport/0")
    line = one_line(err)
    assert code == 2
    assert "has a port that is not a number" in line and "notaport" in line
    assert ":pw@" not in line


def test_database_path_that_is_not_a_number(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "stats", "--url", "redis://127.0.0.1:6379/zero")
    assert code == 2
    assert "names database 'zero'" in one_line(err)


def test_database_out_of_range(capsys: pytest.CaptureFixture[str], redis_server: Any) -> None:
    url = f"redis://127.0.0.1:{redis_server.port}/99"
    code, _, err = run(capsys, "stats", "--url", url)
    assert code == 2
    assert one_line(err) == (f"conveyor: error: Redis at {url} refused the connection: "
                             "DB index is out of range")


@pytest.fixture
def garbage_port() -> Iterator[int]:
    """A TCP port whose listener answers every connection with an HTTP error, not RESP."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\x00\xff\r\n\r\n")
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_port_that_does_not_speak_redis(capsys: pytest.CaptureFixture[str],
                                        garbage_port: int) -> None:
    url = f"redis://127.0.0.1:{garbage_port}/0?password=hunter22"
    code, _, err = run(capsys, "stats", "--url", url)
    line = one_line(err)
    assert code == 2
    assert f"127.0.0.1:{garbage_port}/0 does not answer like a Redis server" in line
    assert "hunter22" not in line


def test_unreachable_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis+cluster://u:s3cret@127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    code, _, err = run(capsys, "stats", "--url", url)
    line = one_line(err)
    assert code == 2
    assert "Redis Cluster at redis+cluster://u:***@127.0.0.1:" in line
    assert "cannot be used" in line and "s3cret" not in line


def test_cluster_url_on_a_server_not_in_cluster_mode(capsys: pytest.CaptureFixture[str],
                                                     redis_server: Any) -> None:
    code, _, err = run(capsys, "stats", "--url",
                       f"redis+cluster://127.0.0.1:{redis_server.port}")
    assert code == 2
    assert "Cluster mode is not enabled" in one_line(err)


def test_deeply_nested_args(env: Env) -> None:
    nested = "[" * 100_000 + "]" * 100_000
    code, _, err = env.run("enqueue", "shop.export", "--force", "--args", nested)
    assert code == 2
    assert one_line(err) == "conveyor: error: --args is nested too deeply to be a job argument"


def test_lone_surrogate_in_args(env: Env) -> None:
    code, _, err = env.run("enqueue", "shop.export", "--force", "--args", '[1, {"a": "\\ud800"}]')
    assert code == 2
    line = one_line(err)
    assert line.startswith("conveyor: error: --args[1]['a'] holds a lone surrogate")
    code, _, err = env.run("enqueue", "shop.export", "--force", "--kwargs", '{"\\udfff": 1}')
    assert code == 2 and "--kwargs key '\\udfff' holds a lone surrogate" in one_line(err)


def test_unexpected_exception_is_one_line_naming_its_type(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: Any) -> Any:
        raise KeyError("\x1b[2Jforged\nline")

    monkeypatch.setattr(stats, "stats_view", broken)
    code, _, err = env.run("stats")
    assert code == 1
    assert one_line(err) == ("conveyor: internal error: KeyError: '\\x1b[2Jforged\\nline' "
                             "(run with --debug or CONVEYOR_DEBUG=1 for the traceback)")
    code, _, err = env.run("stats", "--debug")
    assert code == 1 and "Traceback" in err and "in broken" in err
    assert err.splitlines()[-1].startswith("conveyor: internal error: KeyError")
    monkeypatch.setenv("CONVEYOR_DEBUG", "1")
    code, _, err = env.run("stats")
    assert code == 1 and "Traceback" in err


def test_debug_flag_before_the_command(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats, "stats_view", lambda _: 1 / 0)
    env._capsys.readouterr()
    assert main(["--debug", "stats", "--url", env.url]) == 1
    assert "ZeroDivisionError" in env._capsys.readouterr().err.splitlines()[-1]


@pytest.fixture
def limited_url(redis_server: Any) -> str:
    """A URL logging in as an ACL user that may run everything but CONFIG."""
    user = f"limited{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-config")
    admin.close()
    return f"redis://{user}:pw@127.0.0.1:{redis_server.port}/0?prefix=t{uuid.uuid4().hex[:8]}"


def test_storage_works_for_a_user_without_config(limited_url: str) -> None:
    storage = open_storage(limited_url)
    try:
        [warning] = storage.check_server()  # type: ignore[attr-defined]
        assert "cannot check the maxmemory-policy" in warning and "noeviction" in warning
        assert "pw@" not in warning
        [result] = storage.enqueue([JobSpec(id=uuid.uuid4().hex, name="n", queue="q",
                                            payload='{"a":[],"k":{}}')])
        assert storage.get_job(result.id) is not None
    finally:
        storage.close()


@pytest.mark.slow
def test_worker_start_without_config_warns_in_one_line(limited_url: str,
                                                       tmp_path: Path) -> None:
    (tmp_path / "limited_app.py").write_text(
        f"from conveyor import Conveyor\napp = Conveyor({limited_url!r})\n")
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "worker", "limited_app:app",
         "--processes", "1"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert worker.stderr is not None
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = worker.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
            if "starting" in line:  # the banner, then the server check
                lines.append(worker.stderr.readline())
                break
    finally:
        worker.terminate()
        rest = worker.communicate(timeout=60)[1]
    text = "".join(lines) + rest
    assert worker.returncode == 0, text
    assert "Traceback" not in text and ":pw@" not in text
    assert sum("cannot check the maxmemory-policy" in line for line in text.splitlines()) == 1


def test_closed_pipe_is_not_a_storage_error(env: Env) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "jobs", "list", "--url", env.url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command writes anything, as `| head`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert without_store(err) == ""


def test_storage_error_names_the_url_without_secrets() -> None:
    port = free_port()
    proc = conveyor("jobs", "list", url=f"redis://127.0.0.1:{port}/0?password=pw123&prefix=x")
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert f"127.0.0.1:{port}" in line and "pw123" not in line
