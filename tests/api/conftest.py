"""Fixtures of the API tests: a ``Conveyor`` on a real SQLite file, driven by a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """The app's (and its storage's) clock; tests move it with ``clock.advance``."""
    return FakeClock()


@pytest.fixture(params=["sqlite", "memory"])
def app(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Conveyor]:
    """An app on its own SQLite file (the default engine), and on ``memory://`` (for tests)."""
    url = f"sqlite:///{tmp_path}/t.db" if request.param == "sqlite" else "memory://"
    conveyor = Conveyor(url, clock=clock)
    try:
        yield conveyor
    finally:
        conveyor.close()
