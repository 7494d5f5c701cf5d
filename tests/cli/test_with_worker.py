"""Operations against a real ``conveyor worker`` process: watch a batch finish, stop the worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.cli.conftest import ROOT, Env, conveyor

pytestmark = pytest.mark.slow


def _wait_for(condition: object, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_watch_a_batch_run_by_a_real_worker_then_stop_it(env: Env) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor.cli.main", "worker", "tests.cli.sample_app:app",
         "-q", "exports", "-c", "2", "--processes", "1", "--url", env.url],
        cwd=ROOT, env={**os.environ, "CONVEYOR_URL": env.url, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        watch = conveyor("batch", "watch", env.seeded.batch_id, "--interval", "0.05",
                         url=env.url)
        assert watch.returncode == 0, watch.stderr
        assert "4/4" in watch.stdout and "succeeded 4" in watch.stdout
        mine = lambda: [w for w in env.json("workers") if w["pid"] == worker.pid]  # noqa: E731
        _wait_for(mine, "the worker to register")
        [info] = mine()
        assert info["queues"] == ["exports"] and info["concurrency"] == 2
        stop = conveyor("workers", "stop", info["id"], url=env.url)
        assert stop.returncode == 0, stop.stderr
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()
        worker.wait()
