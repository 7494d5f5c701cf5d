"""A blob store in this process's memory (``memory://name``): for tests, beside the memory
store. Stores of one name are one store within a process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import ClassVar

__all__ = ["MemoryBlobs"]


class MemoryBlobs:
    """A ``BlobStore`` in a dict, under a lock."""

    _named: ClassVar[dict[str, MemoryBlobs]] = {}
    _names_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, where: str = "memory://") -> None:
        self.where = where
        self._lock = threading.Lock()
        self._blobs: dict[str, tuple[float, bytes]] = {}

    @classmethod
    def named(cls, url: str) -> MemoryBlobs:
        """The process's store of this URL, made on first use."""
        with cls._names_lock:
            found = cls._named.get(url)
            if found is None:
                found = cls._named[url] = cls(url)
            return found

    def put(self, key: str, data: bytes) -> None:
        """Keep ``data`` under ``key``."""
        with self._lock:
            self._blobs[key] = (time.time(), bytes(data))

    def get(self, key: str) -> bytes | None:
        """The bytes under ``key``, or None."""
        with self._lock:
            found = self._blobs.get(key)
        return None if found is None else found[1]

    def delete(self, keys: Sequence[str]) -> None:
        """Forget ``keys``."""
        with self._lock:
            for key in keys:
                self._blobs.pop(key, None)

    def listing(self, before: float) -> Iterator[str]:
        """Keys written before ``before``."""
        with self._lock:
            found = sorted(k for k, (at, _) in self._blobs.items() if at < before)
        return iter(found)

    def held(self) -> list[str]:
        """Every key held (tests count what is left)."""
        with self._lock:
            return sorted(self._blobs)

    def close(self) -> None:
        """Nothing to let go of."""
