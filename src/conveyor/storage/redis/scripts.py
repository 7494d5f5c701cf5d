"""The Lua transitions: loaded once from package data, run by SHA, reloaded on NOSCRIPT."""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import redis
from conveyor.storage.redis.connection import Link

SCRIPT_NAMES = (
    "enqueue", "dequeue", "ack", "log", "extend", "promote", "reclaim",
    "cancel", "requeue", "kill", "delete", "trim", "batch", "ring", "repair", "release",
)
LIB = "_lib"
ADMIN = "_admin"  # KEYS shared by the operator scripts
ADMIN_SCRIPTS = frozenset({"cancel", "requeue", "kill", "delete"})
RECOVER = "_recover"  # KEYS and the recovery of a lost attempt, shared by:
RECOVER_SCRIPTS = frozenset({"reclaim", "release"})


def script_text(name: str) -> str:
    """The raw text of ``lua/<name>.lua`` as shipped."""
    return resources.files("conveyor.storage.redis").joinpath(f"lua/{name}.lua").read_text()


def script_source(name: str) -> str:
    """What is sent to Redis: the shared helpers, then the script."""
    admin = script_text(ADMIN) + "\n" if name in ADMIN_SCRIPTS else ""
    recover = script_text(RECOVER) + "\n" if name in RECOVER_SCRIPTS else ""
    return script_text(LIB) + "\n" + admin + recover + script_text(name)


class Scripts:
    """Runs scripts by SHA; a server that lost its script cache (restart, ``SCRIPT FLUSH``)
    answers NOSCRIPT, and the script is sent again with EVAL, which caches it anew."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.sources = {name: script_source(name) for name in SCRIPT_NAMES}
        self.shas = {name: hashlib.sha1(src.encode()).hexdigest()
                     for name, src in self.sources.items()}

    def once(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run a script with one attempt (the caller decides whether a retry is safe)."""
        try:
            return self.link.raw("EVALSHA", self.shas[name], len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return self.link.raw("EVAL", self.sources[name], len(keys), *keys, *args)

    def run(self, name: str, keys: list[str], args: list[Any], patience: float = 5.0) -> Any:
        """Run a script, retrying through short outages (every script is safe to re-run:
        enqueue by id, acks by token, batch updates by job state)."""
        return self.link.retrying(lambda: self.once(name, keys, args), patience)
