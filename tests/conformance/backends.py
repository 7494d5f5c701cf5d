"""Open every storage backend the same way, black-box, through ``open_storage(url, clock)``.

Shared by the conformance suite and the state-machine fuzzer. A backend that cannot run here
(no redis-server, the Redis engine not importable, a URL it refuses) is skipped with the reason
printed; it never counts as a pass.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conveyor.clock import FakeClock
from conveyor.errors import StorageURLError
from conveyor.storage import Backend, open_storage

BACKENDS = ("memory", "sqlite", "redis", "redis_cluster")


def backend_url(name: str, tmp_path: Path, fixture: Callable[[str], Any]) -> str:
    """The URL of an isolated store for one test: its own file, or its own key prefix."""
    if name == "memory":
        return "memory://"
    if name == "sqlite":
        return f"sqlite:///{tmp_path / 'conveyor.db'}"
    try:
        importlib.import_module("conveyor.storage.redis.storage")
    except ImportError as exc:
        pytest.skip(f"{name}: conveyor.storage.redis cannot be imported yet ({exc})")
    try:
        server = fixture("redis_server" if name == "redis" else "redis_cluster")
    except pytest.FixtureLookupError:
        pytest.skip(f"{name}: the {name} fixture does not exist yet in tests/conftest.py")
    return f"{server.url}?prefix=t{uuid.uuid4().hex[:10]}"


def open_backend(name: str, url: str, clock: FakeClock) -> Backend:
    """Open ``url``; skip (with the reason) when the backend cannot open it yet."""
    try:
        return open_storage(url, clock)
    except StorageURLError as exc:
        pytest.skip(f"{name}: {exc}")
    except NotImplementedError as exc:
        pytest.skip(f"{name}: not implemented yet: {exc}")
