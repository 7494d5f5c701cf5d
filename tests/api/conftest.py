"""Fixtures of the API tests: a ``Conveyor`` on a real SQLite file, driven by a fake clock."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """The app's (and its storage's) clock; tests move it with ``clock.advance``."""
    return FakeClock()


@pytest.fixture(params=["sqlite", "memory", pytest.param("redis", marks=pytest.mark.redis)])
def app(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Conveyor]:
    """An app on its own SQLite file (the default engine), on ``memory://`` (for users' tests)
    and on the session's real redis-server under a key prefix of its own."""
    url = f"sqlite:///{tmp_path}/t.db" if request.param == "sqlite" else "memory://"
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url + f"?prefix=t{os.urandom(4).hex()}"
    conveyor = Conveyor(url, clock=clock)
    try:
        yield conveyor
    finally:
        conveyor.close()


@pytest.fixture
def mem(clock: FakeClock) -> Iterator[Conveyor]:
    """An app on ``memory://`` alone: for rules of the client, whose storage side is held to
    one contract on every store elsewhere (tests/conformance)."""
    app = Conveyor("memory://", clock=clock)
    try:
        yield app
    finally:
        app.close()
