"""WAL checkpoints off the committing threads: one checkpointer thread per process.

SQLite's automatic checkpoint runs inside the commit that crosses its threshold (1,000 pages
by default) and waits there for two ``fsync``s (the WAL, then the database file): a thread
storing a long bulk enqueue stood still for ~0.3–0.5 s of every 100,000 jobs. Here a daemon
thread with its own connection runs ``PRAGMA wal_checkpoint(PASSIVE)`` instead, woken by this
process's commits, while the committers go on writing. Durability is unchanged: a commit is
as durable as before (``synchronous`` is untouched), a checkpoint only copies committed pages
from the WAL into the database file.

* The signal is the WAL's frames not yet copied: ``mxFrame`` (the wal-index header) less
  ``nBackfill`` (the checkpoint info), read from the ``-shm`` file, whose layout is part of
  SQLite's file format (https://www.sqlite.org/walformat.html). Each commit reads them in
  the committing thread (one ``pread``; no lock: a torn read only moves one checkpoint) and
  wakes the thread past ``WAL_FRAMES``, SQLite's own default, so a bulk enqueue gets as many
  checkpoints as before, just elsewhere. Without a readable ``-shm`` the ``-wal`` file's size
  stands in. A checkpoint that could not copy every frame (a reader holds an old snapshot, or
  another process's checkpointer is at work: PASSIVE never waits) is tried again on a later
  commit, at most once per ``MIN_INTERVAL``.
* Connections set ``journal_size_limit`` to ``WAL_BYTES``: each time the WAL starts over,
  its file is cut back to that size, so a burst does not leave a huge ``-wal`` file behind.
* The safety net: ``wal_autocheckpoint`` stays on at ``SAFETY_PAGES``, 16 × SQLite's default.
  The WAL only starts over when a checkpoint has copied every frame before a writer begins,
  which a background checkpointer cannot reach while a bulk enqueue commits back to back; the
  committer's own checkpoint at ``SAFETY_PAGES`` then finishes the few frames left (the rest
  are already copied) and the WAL starts over, so it stays bounded (~64 MiB) whatever runs —
  a writer whose checkpointer thread is starved, or a process that never started one.
* Several processes each have a checkpointer; SQLite lets one checkpoint run at a time and
  PASSIVE gives way at once, so they never block each other or a writer.
* Fork: the thread runs inside SQLite with the GIL released, and a fork at that moment would
  give the child SQLite's mutexes (its allocator's, its file table's) locked for ever — the
  child hung at its first connection. A fork therefore waits for the thread to leave SQLite
  (``_busy``, taken in ``os.register_at_fork``'s before hook: one checkpoint at most). The
  thread does not exist in a child. ``Database`` keeps the parent's checkpointer
  (so its connection is never finalised in the child) and starts a new one there on its
  first commit.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

WAL_FRAMES = 1000
"""Frames not yet copied past which the checkpointer checkpoints (SQLite's default)."""

WAL_BYTES = 4 * 1024 * 1024
"""``journal_size_limit``: the -wal file is cut back to this when the WAL starts over."""

SAFETY_PAGES = 16_000
"""``wal_autocheckpoint``: the committer checkpoints itself past this many WAL frames."""

_U32 = struct.Struct("=I")  # the wal-index is in the machine's byte order

MIN_INTERVAL = 0.05
"""Seconds between two checkpoints when the last one could not copy every frame."""


class Checkpointer:
    """A daemon thread that checkpoints one database's WAL for this process."""

    def __init__(self, path: Path, connect: Callable[[], sqlite3.Connection]) -> None:
        self._wal = f"{path}-wal"
        self._shm = f"{path}-shm"
        self._shm_fd: int | None = None
        self._connect = connect
        self._wake = threading.Event()
        self._stopping = False
        self._conn: sqlite3.Connection | None = None
        self._thread = threading.Thread(target=self._run, name="conveyor-checkpoint",
                                        daemon=True)
        self._started = False
        self._start_lock = threading.Lock()
        self._busy = threading.Lock()  # held while the thread is inside SQLite
        _fork_waits_for(self)
        self.pid = os.getpid()
        self.checkpoints = 0
        """Checkpoints run that copied every frame (for tests and diagnostics)."""

    def committed(self) -> None:
        """Note a commit of this process: wake the thread when the WAL is far enough behind.

        Read here, in the committing thread (one ``pread``, ~1 µs), not by waking the thread
        after every commit: a thread switch per commit cost ~60 µs of CPU per small commit.
        """
        if not self._started:
            with self._start_lock:
                if not self._started and not self._stopping:
                    try:  # kept open: the -shm file lives as long as a connection to the file
                        self._shm_fd = os.open(self._shm, os.O_RDONLY)
                    except OSError:
                        self._shm_fd = None  # the -wal file's size stands in
                    self._thread.start()
                    self._started = True
        if self._behind():
            self._wake.set()

    def _run(self) -> None:
        try:
            with self._busy:
                self._conn = self._connect()
        except Exception:  # unopenable now: the safety net (SAFETY_PAGES) checkpoints instead
            return
        try:
            self._loop()
        finally:
            with self._busy:
                self._checkpoint()  # the last one: what this process wrote leaves the WAL
                self._conn.close()

    def _loop(self) -> None:
        done = True  # whether the last checkpoint copied every frame
        last = 0.0
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            if not done and time.monotonic() < last + MIN_INTERVAL:
                continue  # a reader or another checkpointer was in the way: not in a loop
            if not self._behind():
                done = True
                continue
            last = time.monotonic()
            with self._busy:
                done = self._checkpoint()

    def _behind(self) -> bool:
        """Whether the WAL holds ``WAL_FRAMES`` frames not yet copied to the database."""
        try:
            if self._shm_fd is None:
                raise OSError("no -shm file")
            head = os.pread(self._shm_fd, 100, 0)
            (max_frame,), (backfilled,) = _U32.unpack_from(head, 16), _U32.unpack_from(head, 96)
            return bool(max_frame - backfilled >= WAL_FRAMES)
        except (OSError, struct.error):  # no -shm file to read: the -wal file's size
            try:
                return os.stat(self._wal).st_size > WAL_BYTES
            except OSError:  # no WAL file (yet, or removed by the last connection's close)
                return False

    def _checkpoint(self) -> bool:
        """One PASSIVE checkpoint; whether it copied every frame of the WAL."""
        conn = self._conn
        if conn is None:
            return True
        try:
            # fetchall: the statement runs to its end, so this connection keeps no read lock
            ((busy, frames, copied),) = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:  # an outage: the committers will report it; try again later
            return False
        complete = not busy and copied == frames
        if complete:
            self.checkpoints += 1
        return bool(complete)

    def stop(self) -> None:
        """Let the thread end after a last checkpoint, without waiting for it."""
        if os.getpid() != self.pid:  # a parent's, in a forked child: it has no thread here
            return
        self._stopping = True  # read by ``committed`` under its lock: never started after
        self._wake.set()

    def close(self) -> None:
        """Stop the thread and wait for its last checkpoint (in the process that started it;
        in a forked child there is no thread to wait for)."""
        self.stop()
        if self._started and os.getpid() == self.pid:
            self._thread.join()
            fd, self._shm_fd = self._shm_fd, None
            if fd is not None:
                os.close(fd)


def _fork_waits_for(checkpointer: Checkpointer) -> None:
    """Make every ``fork`` of this process wait until ``checkpointer``'s thread is out of
    SQLite, and keep it out until the fork is done (without keeping the object alive)."""
    ref = weakref.ref(checkpointer)
    held: list[threading.Lock] = []

    def before() -> None:
        target = ref()
        if target is not None and target.pid == os.getpid():
            target._busy.acquire()
            held.append(target._busy)

    def after_in_parent() -> None:
        while held:
            held.pop().release()

    os.register_at_fork(before=before, after_in_parent=after_in_parent)
