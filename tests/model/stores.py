"""A fresh store per example on each backend: memory, a SQLite file, a Redis or Cluster prefix."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor import FakeClock
from conveyor.storage import Backend
from tests.conformance.backends import BACKENDS, backend_url, open_backend

__all__ = ["BACKENDS", "StoreFactory", "store_factory"]

StoreFactory = Callable[[FakeClock], Backend]


def store_factory(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> StoreFactory:
    """Open a new, empty store of backend ``name`` on each call (skips when it cannot run)."""
    base = backend_url(name, tmp_path, request.getfixturevalue)
    counter = itertools.count()

    def open_one(clock: FakeClock) -> Backend:
        n = next(counter)
        if name == "memory":
            url = base
        elif name == "sqlite":
            url = f"sqlite:///{tmp_path / f'e{n}.db'}"
        else:
            url = f"{base}e{n}{uuid.uuid4().hex[:4]}"
        return open_backend(name, url, clock)

    return open_one
