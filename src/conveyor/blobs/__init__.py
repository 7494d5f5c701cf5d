"""Blob stores: where job data over a threshold is kept behind a reference in the job
(docs/job-data.md, "Payloads by reference").

``open_blob_store(url)``: ``file:///path`` (a directory, ``directory.py``), ``s3://bucket/
prefix?endpoint=…&region=…`` (S3-compatible storage, ``s3.py``), ``memory://name`` (this
process only, for tests: ``memory.py``), or a store's URL that keeps blobs itself (the
PostgreSQL store: ``conveyor.storage.open_blobs``).
"""

from __future__ import annotations

from conveyor.blobs.directory import DirectoryBlobs
from conveyor.blobs.memory import MemoryBlobs
from conveyor.blobs.s3 import S3Blobs
from conveyor.errors import ConveyorError
from conveyor.storage import open_blobs, redact
from conveyor.storage.blobs import BlobStore

__all__ = ["BlobStore", "DirectoryBlobs", "MemoryBlobs", "S3Blobs", "open_blob_store"]


def open_blob_store(url: str) -> BlobStore:
    """The blob store ``url`` names; ``ConveyorError`` (one line) for one it cannot be."""
    scheme = url.partition("://")[0].lower()
    if scheme == "file":
        return DirectoryBlobs(url)
    if scheme == "s3":
        return S3Blobs(url)
    if scheme == "memory":
        return MemoryBlobs.named(url)
    found = open_blobs(url)
    if found is None:
        raise ConveyorError(f"{redact(url)!r} is no blob store: give file:///dir, "
                            "s3://bucket/prefix, memory://name or a store that keeps blobs")
    return found
