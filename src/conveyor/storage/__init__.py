"""Storage backends behind one URL: ``sqlite:///path.db``, ``redis://``, ``rediss://``,
``redis+cluster://host:7000,host:7001``, ``memory://``.

Backends are imported by scheme so that ``redis`` stays an optional dependency.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from conveyor.clock import Clock
from conveyor.errors import StorageURLError
from conveyor.storage.base import Inspector, Retention, Storage

__all__ = ["DEFAULT_URL", "Backend", "Inspector", "Retention", "Storage", "open_storage"]

DEFAULT_URL = "sqlite:///conveyor.db"

# scheme -> "module:function"; the function takes (url, clock) and returns a Backend.
_OPENERS = {
    "memory": "conveyor.storage.memory:open_memory",
    "sqlite": "conveyor.storage.sqlite.storage:open_sqlite",
    "redis": "conveyor.storage.redis.storage:open_redis",
    "rediss": "conveyor.storage.redis.storage:open_redis",
    "redis+cluster": "conveyor.storage.redis.storage:open_redis",
    "rediss+cluster": "conveyor.storage.redis.storage:open_redis",
    "valkey": "conveyor.storage.redis.storage:open_redis",
}


class Backend(Storage, Inspector, Protocol):
    """A backend object implements both protocols."""


class _Opener(Protocol):
    def __call__(self, url: str, clock: Clock | None = None) -> Backend: ...


def open_storage(url: str, clock: Clock | None = None) -> Backend:
    """Open the backend a URL names. Raises ``StorageURLError`` with the reason when it can't."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise StorageURLError(
            f"storage URL {redact(url)!r} has no scheme; expected one of "
            + ", ".join(f"{s}://" for s in sorted(_OPENERS))
        )
    target = _OPENERS.get(scheme.lower())
    if target is None:
        raise StorageURLError(
            f"unknown storage scheme {scheme!r} in {redact(url)!r}; expected one of "
            + ", ".join(sorted(_OPENERS))
        )
    module_name, func_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # the optional redis client is missing
        raise StorageURLError(
            f"{scheme}:// needs an optional dependency: pip install 'conveyor[redis]' ({exc})"
        ) from exc
    opener: _Opener = getattr(module, func_name)
    return opener(url, clock)


def redact(url: str) -> str:
    """The URL with any password replaced by ``***``, safe for logs and error messages."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, at, host = rest.rpartition("@")
    user, colon, _ = creds.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}{at}{host}" if colon else (
        f"{scheme}://***@{host}" if user and not colon and scheme.startswith("redis") else url
    )
