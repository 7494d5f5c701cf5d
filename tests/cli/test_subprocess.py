"""``conveyor`` as a real subprocess: --app, errors, batch watch, metrics and web servers."""

from __future__ import annotations

import json
import os
import pty
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conveyor.core.job import Outcome
from tests.cli.conftest import ROOT, Env, conveyor
from tests.web.seed import run_one

APP = "tests.cli.sample_app:app"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_stats_from_environment_url(env: Env) -> None:
    proc = conveyor("stats", "--json", url=env.url)
    assert proc.returncode == 0, proc.stderr
    assert {q["name"] for q in json.loads(proc.stdout)["queues"]} == {"default", "exports"}


def test_enqueue_with_app_checks_the_name(env: Env) -> None:
    proc = conveyor("enqueue", "shop.nope", "--app", APP, url=env.url)
    assert proc.returncode == 2
    assert "no job named 'shop.nope'" in proc.stderr and "shop.export" in proc.stderr
    proc = conveyor("enqueue", "shop.export", "--args", "[9]", "--app", APP, "--json",
                    url=env.url)
    assert proc.returncode == 0, proc.stderr
    record = env.app.storage.get_job(json.loads(proc.stdout)["id"])
    assert record is not None and record.queue == "exports" and record.args == [9]


@pytest.mark.parametrize(("url", "needle"), [
    ("foo://x", "unknown storage scheme 'foo'"),
    ("sqlite:////nonexistent-dir/x.db", "nonexistent-dir"),
    ("redis://127.0.0.1:{port}/0", "127.0.0.1:{port}"),
])
def test_storage_errors_are_one_line_exit_2(url: str, needle: str) -> None:
    port = free_port()  # nothing listens there
    proc = conveyor("stats", url=url.format(port=port))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("conveyor: error:")
    assert needle.format(port=port) in lines[0]


def test_batch_watch_follows_progress_until_complete(env: Env) -> None:
    st = env.app.storage
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "batch", "watch", env.seeded.batch_id,
         "--interval", "0.02", "--url", env.url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        assert "0/4" in proc.stdout.readline()  # not a TTY: one plain line per change
        for done in range(1, 5):
            run_one(st, "exports", Outcome.SUCCEEDED)
            while True:  # skip lines that show an in-between state (a job active)
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else ""
                if f" {done}/4" in line:
                    break
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert "\r" not in rest and "succeeded 4" in rest and "state       complete" in rest


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return line


def test_metrics_server(env: Env) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "metrics", "--port", "0", "--url", env.url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = _first_line(proc).split(" on ", 1)[1].strip()
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = resp.read().decode()
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert 'conveyor_queue_jobs{queue="exports",state="pending"} 4' in body
        assert "conveyor_worker_slots{state=\"busy\"} 1" in body
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130


def test_web_server_serves_and_refuses_public_bind_without_token(env: Env,
                                                                 tmp_path: Path) -> None:
    proc = conveyor("web", "--host", "0.0.0.0", "--port", "0", url=env.url)
    assert proc.returncode == 2 and "without a token" in proc.stderr
    server = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "web", "--port", "0", "--url", env.url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = _first_line(server).split(" on ", 1)[1].split()[0]
        with urllib.request.urlopen(base + "/api/stats", timeout=10) as resp:
            assert json.loads(resp.read())["workers"]["busy"] == 1
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)


def test_batch_watch_redraws_in_place_on_a_terminal(env: Env) -> None:
    for _ in range(4):
        run_one(env.app.storage, "exports", Outcome.SUCCEEDED)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor.cli.main", "batch", "watch", env.seeded.batch_id,
             "--url", env.url], cwd=ROOT, stdout=follower, stderr=subprocess.PIPE)
        assert proc.wait(timeout=60) == 0
        os.close(follower)
        follower = -1
        output = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    text = output.decode()
    assert "\r\x1b[2K[" in text and "100.0%" in text and "state       complete" in text
