"""Fixtures of the conformance suite: one ``backend`` per storage, all driven by a fake clock.

A backend that raises ``NotImplementedError`` fails the test like any other error: every
backend is complete, so a missing method is a regression, not work in progress.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.core.clock import FakeClock
from conveyor.storage import Backend
from tests.conformance.backends import BACKENDS, backend_url, open_backend


@pytest.fixture
def clock() -> FakeClock:
    """The clock every backend is opened with; tests move it with ``clock.advance``."""
    return FakeClock()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Backend]:
    """A fresh, isolated store of each backend kind."""
    name = str(request.param)
    store = open_backend(name, backend_url(name, tmp_path, request.getfixturevalue), clock)
    try:
        yield store
    finally:
        store.close()
