"""The worker tests that must hold on every backend use this ``app`` fixture instead of the
memory/SQLite one of conftest.py: ``from tests.worker.backends import every_backend_app``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock


@pytest.fixture(name="app", params=["memory", "sqlite", "redis"])
def every_backend_app(request: pytest.FixtureRequest, tmp_path: Path,
                      clock: FakeClock) -> Iterator[Conveyor]:
    """An app on each backend, the Redis one on its own key prefix of a real server."""
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/w.db"
    else:
        url = f"{request.getfixturevalue('redis_server').url}?prefix=t{uuid.uuid4().hex[:10]}"
    conveyor = Conveyor(url, clock=clock)
    try:
        yield conveyor
    finally:
        conveyor.close()
