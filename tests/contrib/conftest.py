"""Fixtures of the contrib tests: a ``Conveyor`` on a real SQLite file of its own, beside the
application's database, as in production (two databases, two transactions)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.client.registry import JobFunction


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Conveyor]:
    """An app on its own SQLite file."""
    conveyor = Conveyor(f"sqlite:///{tmp_path}/jobs.db")
    try:
        yield conveyor
    finally:
        conveyor.close()


@pytest.fixture
def welcome(app: Conveyor) -> JobFunction:
    """A job to defer; it returns its arguments so a test can tell the jobs apart."""
    @app.job(name="welcome")
    def welcome(user_id: int, greeting: str = "hi") -> list[object]:
        return [user_id, greeting]

    return welcome

