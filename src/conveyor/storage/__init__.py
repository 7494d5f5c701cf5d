"""Storage backends behind one URL: ``sqlite:///path.db``, ``postgresql://``, ``redis://``,
``rediss://``, ``redis+cluster://host:7000,host:7001``,
``redis+sentinel://s1:26379,s2:26379/mymaster/0``, ``memory://``.

Backends are imported by scheme so that ``redis`` and ``psycopg`` stay optional dependencies.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from typing import Protocol
from urllib.parse import unquote

from conveyor.core.clock import Clock
from conveyor.errors import StorageURLError
from conveyor.storage.base import Inspector, Storage
from conveyor.storage.blobs import BlobStore
from conveyor.storage.retention import Retention

__all__ = ["DEFAULT_URL", "Backend", "Inspector", "Retention", "Storage", "default_blobs",
           "open_blobs", "open_storage", "redact", "shown_url", "url_secrets", "without_secrets"]

DEFAULT_URL = "sqlite:///conveyor.db"

# scheme -> "module:function"; the function takes (url, clock) and returns a Backend.
_OPENERS = {
    "memory": "conveyor.storage.memory.storage:open_memory",
    "sqlite": "conveyor.storage.sqlite.storage:open_sqlite",
    "postgresql": "conveyor.storage.postgres.storage:open_postgres",
    "postgres": "conveyor.storage.postgres.storage:open_postgres",
    "redis": "conveyor.storage.redis.storage:open_redis",
    "rediss": "conveyor.storage.redis.storage:open_redis",
    "redis+cluster": "conveyor.storage.redis.storage:open_redis",
    "rediss+cluster": "conveyor.storage.redis.storage:open_redis",
    "redis+sentinel": "conveyor.storage.redis.storage:open_redis",
    "rediss+sentinel": "conveyor.storage.redis.storage:open_redis",
    "valkey": "conveyor.storage.redis.storage:open_redis",
}


class Backend(Storage, Inspector, Protocol):
    """A backend object implements both protocols."""


# scheme -> "module:function" taking a URL and returning it with a relative file path made
# absolute, or None when it names no relative path (a server, or an absolute path already).
_PLACES = {"sqlite": "conveyor.storage.sqlite.connection:absolute_url"}


class _Opener(Protocol):
    def __call__(self, url: str, clock: Clock | None = None, *, create: bool = True,
                 applied: list[str] | None = None) -> Backend: ...


def open_storage(url: str, clock: Clock | None = None, *, create: bool = True,
                 applied: list[str] | None = None) -> Backend:
    """Open the backend a URL names. Raises ``StorageURLError`` with the reason when it can't.

    ``create=False`` opens only a store that exists: a missing database file or schema
    raises ``StorageMissing`` and nothing is created (what a command that only reads wants).
    ``applied``, when given, receives the name of every schema migration this open applied.
    """
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
    except ImportError as exc:  # the optional redis or psycopg client is missing
        extra = "postgres" if "postgres" in module_name else "redis"
        raise StorageURLError(
            f"{scheme}:// needs an optional dependency: pip install 'conveyor[{extra}]' ({exc})"
        ) from exc
    opener: _Opener = getattr(module, func_name)
    return opener(url, clock, create=create, applied=applied)


# scheme -> "module:function" taking a store's URL and returning a ``BlobStore`` kept in the
# store itself (docs/job-data.md); and scheme -> "module:function" giving the blob store a
# store of that scheme uses when none is named (a URL), or None.
_BLOB_OPENERS = {
    "postgresql": "conveyor.storage.postgres.blobs:open_blobs",
    "postgres": "conveyor.storage.postgres.blobs:open_blobs",
}
_BLOB_DEFAULTS = {
    "sqlite": "conveyor.storage.sqlite.connection:blob_directory",
    "postgresql": "conveyor.storage.postgres.blobs:in_store",
    "postgres": "conveyor.storage.postgres.blobs:in_store",
}


def open_blobs(url: str) -> BlobStore | None:
    """The blob store kept inside the store ``url`` names, or None when that kind of store
    keeps none (``conveyor.blobs`` opens directories and S3 itself)."""
    target = _BLOB_OPENERS.get(url.partition("://")[0].lower())
    if target is None:
        return None
    module_name, func_name = target.split(":")
    opener = getattr(importlib.import_module(module_name), func_name)
    found: BlobStore = opener(url)
    return found


def default_blobs(url: str) -> str | None:
    """The blob store URL a store uses when the app names none: a directory beside a SQLite
    file (``file:///path/jobs.db.blobs``), the PostgreSQL store itself; None for the others
    (Redis, memory), which need one named."""
    target = _BLOB_DEFAULTS.get(url.partition("://")[0].lower())
    if target is None:
        return None
    module_name, func_name = target.split(":")
    found: str | None = getattr(importlib.import_module(module_name), func_name)(url)
    return found


def shown_url(url: str) -> tuple[str, bool]:
    """The URL as a person should see it, and whether it names a path relative to the
    working directory: credentials masked (``redact``) and a relative file path made
    absolute, so that two processes started in different directories show two files."""
    scheme = url.partition("://")[0].lower()
    target = _PLACES.get(scheme)
    if target is not None:
        module_name, func_name = target.split(":")
        absolute = getattr(importlib.import_module(module_name), func_name)(url)
        if absolute is not None:
            return redact(absolute), True
    return redact(url), False


# Query parameters whose value is a credential: redis-py's password, sentinel_password and
# ssl_keyfile_password, any *token* or *secret*, and the usual spellings; and librdkafka's
# dotted settings that carry one (sasl.password, sasl.oauthbearer.config, .extensions,
# ssl.key.pem: a private key; every *.pem is masked, certificates too, rather than guess).
_SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token", "credential", "apikey",
                 "api_key")
_SECRET_NAMES = frozenset(("pass", "auth", "key", "pem", "config", "extensions", "jaas"))
_WORDS = re.compile(r"[^a-z0-9]+")


def is_secret_param(name: str) -> bool:
    """Whether a URL query parameter of this name holds a credential."""
    lowered = name.lower()
    return (any(word in lowered for word in _SECRET_WORDS)
            or any(word in _SECRET_NAMES for word in _WORDS.split(lowered)))


def _split(url: str) -> tuple[str, str, str, str]:
    """(``scheme://``, userinfo or '', the rest of the authority and path, query or '').

    The authority ends at the first ``?`` or ``#`` (a ``/`` may be part of a password that
    was not percent-encoded); the userinfo ends at its last ``@``.
    """
    scheme, sep, rest = url.partition("://")
    head = scheme + sep if sep else ""
    if not sep:
        rest = url
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, query = rest[:cut], rest[cut:]
    at = authority.rfind("@") if sep else -1
    if at < 0:
        return head, "", authority, query
    return head, authority[:at], authority[at + 1:], query


def redact(url: str) -> str:
    """The URL with every credential replaced by ``***``, safe for logs and error messages.

    Masks the userinfo password (``user:***@``; a lone Redis user part, which redis-py may
    take as a password, is masked whole) and the value of every query parameter that holds a
    credential (``?password=``, ``sentinel_password=``, ``ssl_keyfile_password=``,
    ``token=``, …).
    """
    head, userinfo, rest, query = _split(url)
    if userinfo:
        user, colon, _ = userinfo.partition(":")
        if colon:
            userinfo = f"{user}:***"
        elif head.lower().startswith(("redis", "valkey")):
            userinfo = "***"
        rest = f"{userinfo}@{rest}"
    return head + rest + _redact_query(query)


def _redact_query(query: str) -> str:
    if not query:
        return query
    out = []
    for part in query[1:].replace(";", "&").split("&"):
        name, eq, _ = part.partition("=")
        out.append(f"{name}=***" if eq and is_secret_param(name) else part)
    return query[0] + "&".join(out)


def url_secrets(url: str) -> list[str]:
    """Every credential a URL holds, raw and percent-decoded, to scrub from other text."""
    head, userinfo, _, query = _split(url)
    found = []
    if ":" in userinfo:
        found.append(userinfo.partition(":")[2])
    elif head.lower().startswith(("redis", "valkey")):
        found.append(userinfo)
    for part in query[1:].replace(";", "&").split("&"):
        name, eq, value = part.partition("=")
        if eq and is_secret_param(name):
            found.append(value)
    return [s for raw in found if raw for s in {raw, unquote(raw)}]


def without_secrets(text: str, url: str, extra: Iterable[str] = ()) -> str:
    """``text`` (a driver's or a library's error) with every credential of ``url``, and each
    of ``extra``, replaced by ``***``: for messages that may quote what they were given."""
    for secret in sorted({*url_secrets(url), *(e for e in extra if e)}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
