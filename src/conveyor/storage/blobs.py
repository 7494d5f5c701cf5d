"""What a blob store is (``BlobStore``): where job data over a threshold is kept, behind a
reference in the job (docs/job-data.md, "Payloads by reference").

The stores are in ``conveyor/blobs/`` (a directory, S3-compatible storage, memory); the
PostgreSQL store offers a table of its own database (``storage/postgres/blobs.py``), opened
through ``conveyor.storage.open_blobs``. Keys are made by ``conveyor.client.payloads``: ASCII
letters, digits, ``.`` and ``-``, starting with the id of the job the blob belongs to.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

__all__ = ["BlobStore"]


class BlobStore(Protocol):
    """Bytes by key. ``put`` returns once the bytes are durable (a job referencing them is
    stored only after it returns); ``get`` returns None for a key it does not hold; failures
    to reach the store raise ``BlobUnavailable``."""

    #: The store as a person should see it (credentials masked).
    where: str

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (replacing what was there)."""
        ...

    def get(self, key: str) -> bytes | None:
        """The bytes under ``key``, or None."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Remove ``keys`` (a key not held is no error)."""
        ...

    def listing(self, before: float) -> Iterator[str]:
        """Every key written before ``before`` (epoch seconds): what the janitor weighs."""
        ...

    def close(self) -> None:
        """Let go of connections and files."""
        ...
