"""The ``conveyor worker`` command's argument handling, and worker logging."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.cli.main import main
from conveyor.cli.worker import (
    AppLoadError,
    WorkerOptionError,
    build_config,
    cores,
    load_app,
    plan_processes,
    register,
)
from conveyor.worker.config import WorkerConfig
from conveyor.worker.launcher import Launcher
from conveyor.worker.logs import JsonFormatter, configure_logging, reopen_logs


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger back as it was (pytest's capture handlers included)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_load_app_explains_what_is_wrong() -> None:
    for spec, words in (("nocolon", "module:attribute"),
                        ("no_such_module_xyz:app", "cannot import"),
                        ("tests.integration.apps.runs:nothing", "no attribute"),
                        ("tests.integration.apps.runs:register", "not a conveyor.Conveyor")):
        with pytest.raises(AppLoadError, match=words):
            load_app(spec)
    assert isinstance(load_app("tests.integration.apps.runs:app"), Conveyor)


def test_bad_flags_exit_2_with_one_line(capsys: pytest.CaptureFixture[str],
                                        restore_logging: None) -> None:
    assert main(["worker", "no_such_module_xyz:app"]) == 2
    assert "cannot import" in capsys.readouterr().err
    assert main(["worker", "tests.integration.apps.runs:app", "-c", "0",
                 "--url", "memory://"]) == 2
    assert "concurrency" in capsys.readouterr().err
    assert main(["worker", "tests.integration.apps.runs:app", "--processes", "0",
                 "--url", "memory://"]) == 2
    assert "--processes must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["worker", "tests.integration.apps.runs:app", "-q", "critical,zero"])


def test_executor_and_recycling_flags_reach_the_config(capsys: pytest.CaptureFixture[str],
                                                       restore_logging: None) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["worker", "m:app", "--executor", "process",
                              "--max-jobs-per-child", "100", "--max-memory-per-child", "512"])
    config = build_config(args, app="m:app")
    assert (config.executor, config.app, config.max_jobs_per_child,
            config.max_memory_per_child) == ("process", "m:app", 100, 512)
    assert main(["worker", "tests.integration.apps.runs:app", "--max-jobs-per-child", "-1",
                 "--url", "memory://"]) == 2
    assert "max jobs and max memory per child" in capsys.readouterr().err


def test_one_process_per_core_under_a_supervisor_by_default(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "conveyor.worker"):
        assert plan_processes(None) == (cores(), True)
    assert (f"starting {cores()} worker processes (one per core; --processes to change)"
            in caplog.messages)
    assert cores() >= 1
    # An explicit count is kept; 1 is a single process without a supervisor, as before.
    assert plan_processes(1) == (1, False)
    assert plan_processes(3) == (3, True)
    with pytest.raises(WorkerOptionError):
        plan_processes(0)


def test_json_log_lines_and_reopen_after_rotation(tmp_path: Path,
                                                  restore_logging: None) -> None:
    path = tmp_path / "worker.log"
    configure_logging("json", str(path))
    log = logging.getLogger("conveyor.worker")
    log.warning("before %s", "rotation")
    path.rename(tmp_path / "worker.log.1")
    reopen_logs()
    log.warning("after rotation")
    old = [json.loads(line) for line in (tmp_path / "worker.log.1").read_text().splitlines()]
    new = [json.loads(line) for line in path.read_text().splitlines()]
    assert old[0]["msg"] == "before rotation" and old[0]["level"] == "WARNING"
    assert [r["msg"] for r in new] == ["log files reopened", "after rotation"]
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, None)
        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(JsonFormatter().format(record))["exc"]


def test_storage_server_warnings_are_logged_loudly(caplog: pytest.LogCaptureFixture) -> None:
    app = Conveyor("memory://")
    launcher = Launcher(app, WorkerConfig(concurrency=1))
    launcher.storage.check_server = lambda: ["maxmemory-policy is allkeys-lru"]  # type: ignore[attr-defined]
    with caplog.at_level(logging.INFO, logger="conveyor.worker"):
        launcher.start()
        launcher.stop(1)
    text = caplog.text
    assert "STORAGE SERVER WARNING: maxmemory-policy is allkeys-lru" in text
    assert "starting: storage=memory:// queues=default concurrency=1" in text


def test_run_returns_after_a_remote_stop_command() -> None:
    app = Conveyor("memory://")
    config = WorkerConfig(concurrency=1, heartbeat_interval=0.05, lease=1.0)
    launcher = Launcher(app, config)

    def send_stop() -> None:
        while not app.storage.workers():
            threading.Event().wait(0.01)
        app.storage.command_worker(config.worker_id, "stop")

    sender = threading.Thread(target=send_stop, daemon=True)
    sender.start()
    assert launcher.run() == 0  # in pytest's main thread: real signal pipe
    sender.join(5)
    assert app.storage.workers() == []
