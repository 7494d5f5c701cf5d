"""WAL checkpoints off the committing threads: one checkpointer thread per process.

SQLite's automatic checkpoint runs inside the commit that crosses its threshold (1,000 pages
by default) and waits there for two ``fsync``s (the WAL, then the database file): a thread
storing a long bulk enqueue stood still for ~0.3–0.5 s of every 100,000 jobs. Here a daemon
thread with its own connection runs ``PRAGMA wal_checkpoint(PASSIVE)`` instead, woken by this
process's commits, while the committers go on writing. Durability is unchanged: a commit is
as durable as before (``synchronous`` is untouched), a checkpoint only copies committed pages
from the WAL into the database file.

* The signal is the ``-wal`` file's size. Connections set ``journal_size_limit`` to
  ``WAL_BYTES``: each time the WAL starts over (after a complete checkpoint), its file is cut
  back to that size, so it is larger only when the WAL has grown past the threshold since.
  A commit sets an ``Event``; the thread ``stat``s the file and checkpoints when it is larger,
  at most once per ``MIN_INTERVAL`` when a checkpoint could not finish (a reader holds an old
  snapshot, or another process's checkpointer is at work: PASSIVE never waits, it is retried).
* The safety net: ``wal_autocheckpoint`` stays on at ``SAFETY_PAGES``, 16 × SQLite's default.
  The WAL only starts over when a checkpoint has copied every frame before a writer begins,
  which a background checkpointer cannot reach while a bulk enqueue commits back to back; the
  committer's own checkpoint at ``SAFETY_PAGES`` then finishes the few frames left (the rest
  are already copied) and the WAL starts over, so it stays bounded (~64 MiB) whatever runs —
  a writer whose checkpointer thread is starved, or a process that never started one.
* Several processes each have a checkpointer; SQLite lets one checkpoint run at a time and
  PASSIVE gives way at once, so they never block each other or a writer.
* Fork: the thread does not exist in a child. ``Database`` keeps the parent's checkpointer
  (so its connection is never finalised in the child) and starts a new one there on its
  first commit.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

WAL_BYTES = 4 * 1024 * 1024
"""The -wal file size past which the checkpointer checkpoints (≈ SQLite's default 1,000 pages)."""

SAFETY_PAGES = 16_000
"""``wal_autocheckpoint``: the committer checkpoints itself past this many WAL frames."""

MIN_INTERVAL = 0.05
"""Seconds between two checkpoints when the last one could not copy every frame."""


class Checkpointer:
    """A daemon thread that checkpoints one database's WAL for this process."""

    def __init__(self, path: Path, connect: Callable[[], sqlite3.Connection]) -> None:
        self._wal = f"{path}-wal"
        self._connect = connect
        self._wake = threading.Event()
        self._stopping = False
        self._conn: sqlite3.Connection | None = None
        self._thread = threading.Thread(target=self._run, name="conveyor-checkpoint",
                                        daemon=True)
        self._started = False
        self._start_lock = threading.Lock()
        self.pid = os.getpid()
        self.checkpoints = 0
        """Checkpoints run that copied every frame (for tests and diagnostics)."""

    def committed(self) -> None:
        """Note a commit of this process (cheap: it only wakes the thread)."""
        if not self._started:
            with self._start_lock:
                if not self._started and not self._stopping:
                    self._thread.start()
                    self._started = True
        self._wake.set()

    def _run(self) -> None:
        try:
            self._conn = self._connect()
        except Exception:  # unopenable now: the safety net (SAFETY_PAGES) checkpoints instead
            return
        try:
            self._loop()
        finally:
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
            if not done:  # a reader or another checkpointer was in the way: not in a loop
                time.sleep(max(0.0, last + MIN_INTERVAL - time.monotonic()))
            if not self._grown():
                done = True
                continue
            last = time.monotonic()
            done = self._checkpoint()
            if not done:
                self._wake.set()  # try again, MIN_INTERVAL later, without waiting for a commit

    def _grown(self) -> bool:
        try:
            return os.stat(self._wal).st_size > WAL_BYTES
        except OSError:  # no WAL file (yet, or deleted by the last connection's close)
            return False

    def _checkpoint(self) -> bool:
        """One PASSIVE checkpoint; whether it copied every frame of the WAL."""
        conn = self._conn
        if conn is None:
            return True
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
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
