"""Fixtures of the worker tests: an app on memory:// or a real SQLite file, on a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.core.ids import new_id
from conveyor.worker.config import WorkerConfig


@pytest.fixture
def clock() -> FakeClock:
    """The app's and storage's clock; tests move it with ``clock.advance``."""
    return FakeClock()


@pytest.fixture(params=["memory", "sqlite"])
def app(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Conveyor]:
    """An app on each backend that runs in-process."""
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/w.db"
    conveyor = Conveyor(url, clock=clock)
    try:
        yield conveyor
    finally:
        conveyor.close()


@pytest.fixture
def config() -> WorkerConfig:
    """A small worker configuration with the default timings."""
    return WorkerConfig(concurrency=4, worker_id="test-worker")


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def live_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    """An app on the system clock, on each backend (Redis: the session's server, own prefix)."""
    if request.param == "redis":
        url = f"{request.getfixturevalue('redis_server').url}?prefix=w{new_id()}"
    else:
        url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/l.db"
    app = Conveyor(url)
    try:
        yield app
    finally:
        app.close()
