"""Fixtures of the conformance suite: one ``backend`` per storage, all driven by a fake clock.

A test that calls something a backend has not implemented yet (``NotImplementedError``) is
skipped with the reason, so work in progress is visible as skips, never as passes.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.clock import FakeClock
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


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
    """Turn ``NotImplementedError`` from a backend into a skip that names what is missing."""
    try:
        return (yield)
    except NotImplementedError as exc:
        pytest.skip(f"not implemented by this backend yet: {exc or 'NotImplementedError'}")
