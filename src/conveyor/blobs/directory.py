"""A blob store in a directory (``file:///var/lib/app/blobs``): one file per blob, under a
subdirectory named after the last two characters of the key's job id, so no directory
holds more than a 256th of the blobs.

A blob is written to a temporary file in the same directory, flushed to disk (``fsync``)
and renamed into place, and the directory is flushed too: once ``put`` returns, the blob
survives a crash of the machine, and a reader never sees half a blob. A temporary file a
crash left behind is listed like a blob (it is one no job references) and collected by the
janitor after its grace.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote

from conveyor.errors import BlobUnavailable, ConveyorError

__all__ = ["DirectoryBlobs"]

_MODE = 0o600  # job data is often personal data: the owner reads it, nobody else


class DirectoryBlobs:
    """A ``BlobStore`` over a directory, created on first write."""

    def __init__(self, url: str) -> None:
        scheme, sep, rest = url.partition("://")
        if scheme.lower() != "file" or not sep or not rest.startswith("/"):
            raise ConveyorError(f"blob directory {url!r}: expected file:///absolute/path")
        self.root = Path(unquote(rest.split("?", 1)[0]))
        self.where = str(self.root)

    def _path(self, key: str) -> Path:
        head = key.split(".", 1)[0]
        return self.root / (head[-2:] or "00") / key

    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` durably, then rename it into place."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f"{key}.tmp-{secrets.token_hex(4)}")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _MODE)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, path)
            _sync_dir(path.parent)
        except OSError as exc:
            raise BlobUnavailable(f"blob directory {self.where}: {exc.strerror or exc}") from exc

    def get(self, key: str) -> bytes | None:
        """The file's bytes, or None when there is no such file."""
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BlobUnavailable(f"blob directory {self.where}: {exc.strerror or exc}") from exc

    def delete(self, keys: Sequence[str]) -> None:
        """Remove the files (one already gone is no error)."""
        for key in keys:
            try:
                self._path(key).unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise BlobUnavailable(f"blob directory {self.where}: "
                                      f"{exc.strerror or exc}") from exc

    def listing(self, before: float) -> Iterator[str]:
        """Every file modified before ``before``, temporary files included."""
        try:
            groups = sorted(os.scandir(self.root), key=lambda e: e.name)
        except FileNotFoundError:
            return
        for group in groups:
            if not group.is_dir():
                continue
            for entry in os.scandir(group.path):
                try:
                    if entry.is_file() and entry.stat().st_mtime < before:
                        yield entry.name
                except FileNotFoundError:  # deleted meanwhile
                    continue

    def close(self) -> None:
        """Nothing held open."""


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
