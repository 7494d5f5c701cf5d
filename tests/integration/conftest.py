"""Fixtures of the worker integration tests: a SQLite URL in tmp_path and worker cleanup."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from tests.integration.apps.runs import register
from tests.integration.harness import Worker


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A SQLite file of the test's own."""
    return f"sqlite:///{tmp_path}/jobs.db"


@pytest.fixture
def client(url: str) -> Iterator[Conveyor]:
    """The test's app on the same storage, with the test jobs registered."""
    app = Conveyor(url)
    register(app)
    try:
        yield app
    finally:
        app.close()


@pytest.fixture
def spawn(url: str, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start ``conveyor worker`` processes; every one is killed at teardown."""
    started: list[Worker] = []

    def start(*args: str, name: str = "worker") -> Worker:
        worker = Worker(url, tmp_path, *args, name=f"{name}{len(started)}")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill_group()
