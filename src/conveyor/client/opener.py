"""The storage one process uses: opened on first use, and again in a child after ``fork``.

Worker processes never share a connection with their parent: a parent's connection is
dropped, never closed, in the child (closing it could disturb the parent's session on the
shared socket or file), and the child opens its own on its first use. A storage given whole
(``Conveyor(storage=...)``) is used as it is, in every process.
"""

from __future__ import annotations

import os
import threading

from conveyor.core.clock import Clock
from conveyor.storage import Backend, open_storage

__all__ = ["StorageOpener"]


class StorageOpener:
    """Holds one process's storage; ``given`` is a storage to use as it is."""

    def __init__(self, given: Backend | None = None) -> None:
        self._given = given is not None
        self._storage = given
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def get(self, url: str, clock: Clock) -> Backend:
        """This process's storage, opened from ``url`` with ``clock`` if it holds none."""
        pid = os.getpid()
        storage = self._storage
        if storage is not None and (self._given or self._pid == pid):
            return storage
        with self._lock:
            if self._storage is None or (not self._given and self._pid != pid):
                self._storage = open_storage(url, clock)
                self._pid = pid
            return self._storage

    def opened(self) -> Backend | None:
        """The storage this process holds already (given, or opened by a use), or None."""
        with self._lock:
            if self._storage is not None and (self._given or self._pid == os.getpid()):
                return self._storage
            return None

    def close(self) -> None:
        """Close the storage if this process holds it; the next ``get`` opens it again."""
        with self._lock:
            storage, self._storage = self._storage, None
            if storage is not None and (self._given or self._pid == os.getpid()):
                storage.close()
            self._given = False
