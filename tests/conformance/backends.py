"""Open every storage backend the same way, black-box, through ``open_storage(url, clock)``.

Shared by the conformance suite and the state-machine fuzzer. Every backend is finished, so
a backend that cannot be imported, a fixture that is missing, a URL it refuses or a method it
does not implement is an error, never a skip: a broken import of the Redis engine would
otherwise turn every Redis case into a quiet skip. The one skip left is the machine's: no
redis-server or PostgreSQL installed (tests/conftest.py), which CI refuses (see
``CI_ALLOWED_SKIPS``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conveyor.core.clock import FakeClock
from conveyor.storage import Backend, open_storage

BACKENDS = ("memory", "sqlite", "postgres", "redis", "redis_cluster", "redis_sentinel")


def backend_url(name: str, tmp_path: Path, fixture: Callable[[str], Any]) -> str:
    """The URL of an isolated store for one test: its own file, schema or key prefix."""
    if name == "memory":
        return "memory://"
    if name == "sqlite":
        return f"sqlite:///{tmp_path / 'conveyor.db'}"
    if name == "postgres":
        return f"{fixture('postgres_server').url}?schema=t{uuid.uuid4().hex[:10]}"
    if name == "redis_sentinel":
        return str(fixture("redis_sentinel").url(f"prefix=t{uuid.uuid4().hex[:10]}"))
    server = fixture("redis_server" if name == "redis" else "redis_cluster")
    return f"{server.url}?prefix=t{uuid.uuid4().hex[:10]}"


def open_backend(name: str, url: str, clock: FakeClock) -> Backend:
    """Open ``url``; whatever goes wrong (an import, the URL) fails the test."""
    return open_storage(url, clock)
