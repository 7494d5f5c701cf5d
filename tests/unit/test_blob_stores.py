"""Every blob store keeps the ``BlobStore`` contract (conveyor/storage/blobs.py): bytes in,
the same bytes out, None for a key never written, deletion that tolerates a key gone, and a
listing by age the janitor can trust. The same test runs on a directory, memory, an
S3-compatible server (moto's, local) and the PostgreSQL store's own table.

Expectation from trigger.dev's payload offloading and Temporal's external storage: what a
job references is exactly what it gets back, and a reference to nothing is reported, never
guessed.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.blobs import open_blob_store
from conveyor.errors import BlobUnavailable
from conveyor.storage.blobs import BlobStore

STORES = ("directory", "memory", "s3", "postgres")


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobStore]:
    kind = request.param
    if kind == "directory":
        url = f"file://{tmp_path / 'blobs'}"
    elif kind == "memory":
        url = f"memory://{uuid.uuid4().hex}"
    elif kind == "s3":
        url = request.getfixturevalue("s3_server").bucket_url()
    else:
        server: Any = request.getfixturevalue("postgres_server")
        url = f"{server.url}?schema=b{uuid.uuid4().hex[:10]}"
    found = open_blob_store(url)
    try:
        yield found
    finally:
        found.close()


def test_bytes_come_back_exactly_and_a_missing_key_is_none(store: BlobStore) -> None:
    data = os.urandom(70_000) + b"\x00\xff" * 10
    store.put("01ab.p.aa11", data)
    store.put("01ab.r.bb22", b"")
    assert store.get("01ab.p.aa11") == data
    assert store.get("01ab.r.bb22") == b""
    assert store.get("01ab.p.nothere") is None


def test_a_put_replaces_and_delete_tolerates_keys_gone(store: BlobStore) -> None:
    store.put("02cd.p.aa11", b"first")
    store.put("02cd.p.aa11", b"second")
    assert store.get("02cd.p.aa11") == b"second"
    store.delete(["02cd.p.aa11", "02cd.p.never"])
    assert store.get("02cd.p.aa11") is None
    store.delete([])


def test_the_listing_holds_what_was_written_before_a_time_and_nothing_after(
        store: BlobStore) -> None:
    keys = [f"03ef{i:02d}.p.k{i}" for i in range(5)]
    for key in keys:
        store.put(key, b"x")
    later = time.time() + 5
    assert sorted(store.listing(later)) == sorted(keys)
    assert list(store.listing(0.0)) == []  # nothing is older than the epoch


def test_many_keys_are_listed_and_deleted_in_pages(store: BlobStore) -> None:
    """More than one page of S3's listing (1,000) and of the table's (1,000)."""
    keys = [f"04aa{i:05d}.r.z" for i in range(1_050)]
    for key in keys:
        store.put(key, b"")
    assert sorted(store.listing(time.time() + 5)) == sorted(keys)
    store.delete(keys)
    assert list(store.listing(time.time() + 5)) == []


def test_a_directory_store_that_cannot_be_written_says_so_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = open_blob_store(f"file://{blocker}/blobs")
    with pytest.raises(BlobUnavailable) as caught:
        store.put("05.p.a", b"x")
    assert "\n" not in str(caught.value) and str(blocker) in str(caught.value)


def test_an_s3_server_that_refuses_the_credentials_is_unavailable_not_missing(
        s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that answers "no" is an outage of the store (retried), not a missing blob
    (the job would end dead for a blob that exists)."""
    store = open_blob_store(s3_server.bucket_url())
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "")
    with pytest.raises(BlobUnavailable, match="AWS_ACCESS_KEY_ID"):
        store.get("06.p.a")
