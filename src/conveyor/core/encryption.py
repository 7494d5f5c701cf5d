"""Encryption at rest: ``Keys``, the AES-GCM keys a job's data is sealed with before it
reaches the store (docs/job-data.md, "Encryption at rest").

Several keys, each with an id: the newest (the last given) seals, every one opens, so keys
rotate without a stop (add the new key everywhere, then make it the last; ``conveyor jobs
reencrypt`` seals stored jobs again with it; drop the old one when no job needs it). Each
sealing draws a fresh 96-bit nonce and binds the ciphertext to what it is (``aad``: the kind
of field and the job it belongs to), so a ciphertext moved into another job, or from a
result into an argument, does not open.

``cryptography`` is an optional extra (``pip install 'conveyor[encryption]'``), imported on
first use: an app without keys never imports it.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from conveyor.errors import ConveyorError, UnsealError

__all__ = ["KEY_ID", "Keys"]

#: What a key id may be: short, and safe inside the sealed forms' text.
KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_NONCE = 12


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConveyorError("encryption needs the cryptography package: pip install "
                            "'conveyor[encryption]'") from None
    return AESGCM


def _key_bytes(key_id: str, key: bytes | str) -> bytes:
    raw = key if isinstance(key, bytes) else base64.b64decode(key.strip() + "==", validate=False)
    if len(raw) not in (16, 24, 32):
        raise ValueError(f"key {key_id!r} is {len(raw)} bytes: an AES key is 16, 24 or 32 "
                         "bytes (Keys.generate() makes one)")
    return raw


class Keys:
    """The keys job data is sealed with: ``Keys({"2026-11": key, "2027-02": newer})``.

    ``keys`` maps key ids to keys (32 random bytes, or their base64 text); the last one seals.
    ``jobs``: the job names whose data is sealed, as names or ``fnmatch`` patterns
    (``"billing.*"``); None seals every job. ``Keys.from_env()`` reads
    ``CONVEYOR_KEYS="id:base64,id:base64"``.
    """

    def __init__(self, keys: Mapping[str, bytes | str] | Iterable[tuple[str, bytes | str]],
                 *, jobs: Iterable[str] | None = None) -> None:
        pairs = list(keys.items() if isinstance(keys, Mapping) else keys)
        if not pairs:
            raise ValueError("Keys needs at least one key")
        self._keys: dict[str, bytes] = {}
        for key_id, key in pairs:
            if not isinstance(key_id, str) or not KEY_ID.fullmatch(key_id):
                raise ValueError(f"key id {key_id!r}: 1 to 64 letters, digits, '_', '-', '.'")
            self._keys[key_id] = _key_bytes(key_id, key)
        self.current = pairs[-1][0]
        self._patterns = None if jobs is None else tuple(jobs)
        self._chosen: dict[str, bool] = {}
        self._ciphers: dict[str, Any] = {}

    def __repr__(self) -> str:  # never the keys themselves
        return f"<Keys current={self.current!r} ids={list(self._keys)}>"

    @staticmethod
    def generate() -> str:
        """A new random 256-bit key, as base64 text."""
        return base64.b64encode(os.urandom(32)).decode()

    @classmethod
    def from_env(cls, variable: str = "CONVEYOR_KEYS", *,
                 jobs: Iterable[str] | None = None) -> Keys | None:
        """Keys from ``$variable`` (``id:base64,id:base64``, the last seals), or None when
        it is not set."""
        text = os.environ.get(variable, "").strip()
        if not text:
            return None
        pairs = []
        for part in text.split(","):
            key_id, sep, key = part.strip().partition(":")
            if not sep:
                raise ValueError(f"${variable}: expected id:base64 pairs separated by commas")
            pairs.append((key_id, key))
        return cls(pairs, jobs=jobs)

    @property
    def ids(self) -> list[str]:
        """Every key id held, oldest first (the last seals)."""
        return list(self._keys)

    def seals(self, name: str) -> bool:
        """True when the data of job ``name`` is sealed."""
        if self._patterns is None:
            return True
        found = self._chosen.get(name)
        if found is None:
            found = any(fnmatch.fnmatchcase(name, p) for p in self._patterns)
            if len(self._chosen) < 4096:
                self._chosen[name] = found
        return found

    def _cipher(self, key_id: str) -> Any:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            key = self._keys.get(key_id)
            if key is None:
                raise UnsealError(f"sealed with key {key_id!r}, which this process does not "
                                f"hold (it holds {', '.join(map(repr, self._keys))})")
            cipher = self._ciphers[key_id] = _aesgcm()(key)
        return cipher

    def seal(self, data: bytes, aad: bytes) -> tuple[str, bytes]:
        """``(key id, nonce + ciphertext)`` of ``data`` under the current key."""
        nonce = os.urandom(_NONCE)
        return self.current, nonce + self._cipher(self.current).encrypt(nonce, data, aad)

    def open(self, key_id: str, blob: bytes, aad: bytes) -> bytes:
        """The data ``seal`` sealed; ``UnsealError`` naming the key id when it is not held or
        does not open it."""
        cipher = self._cipher(key_id)
        try:
            return bytes(cipher.decrypt(blob[:_NONCE], blob[_NONCE:], aad))
        except Exception:  # cryptography's InvalidTag, or a blob too short to hold a tag
            raise UnsealError(f"key {key_id!r} does not open this data (a wrong key, or data "
                            "moved from another job or damaged)") from None
