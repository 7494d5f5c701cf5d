"""Vacuuming the jobs table by hand when dead row versions pile up (``Storage.tidy``).

Every lease and every ack writes a new version of the job's row; the old version's entries
stay in the indexes until VACUUM. A lease walks ``jobs_ready`` from its oldest entry, so the
entries of every job leased since the last VACUUM are walked again by each lease. Autovacuum
comes to a database once a minute (``autovacuum_naptime``) whatever the table's own
thresholds say: one worker draining 300,000 jobs left 590,000 dead versions and slowed
from 17,000 to 9,000 jobs/s as it went (docs/postgres.md, "Vacuum").

So each worker process's janitor calls ``tidy()`` every second. It reads the table's count
of dead versions (one row of ``pg_stat_user_tables``) and, past ``tidy_dead``, runs
``VACUUM (SKIP_LOCKED) jobs``: the same work autovacuum would do later, done when the table
needs it. SKIP_LOCKED makes a second process (or autovacuum at work) a reason to skip, not to
wait. Only the table's owner may vacuum it: another role leaves it to autovacuum, silently.
``?vacuum=0`` in the URL turns it off, for a DBA who schedules VACUUM otherwise.
A VACUUM that an old snapshot kept from removing anything (a long transaction elsewhere) is
not repeated each second: the next waits twice as long each time, up to ``HELD_MAX``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg

from conveyor.storage.postgres.connection import Database, reads

__all__ = ["HELD_MAX", "TIDY_DEAD", "PostgresVacuum"]

log = logging.getLogger("conveyor.storage")

TIDY_DEAD = 50_000
"""Dead row versions in ``jobs`` past which ``tidy`` vacuums it (two per job run: at 15,000
jobs a second, every 2 s, the shortest gap; a VACUUM of a busy table holding a million
finished jobs took about 0.25 s in the trials before pg_vacuum_probe)."""
MIN_GAP = 2.0  # seconds between two VACUUMs of one process, at least
SHARE = 10  # ... and at least this many times as long as the last one took
HELD_MAX = 300.0  # the longest wait after VACUUMs an old snapshot held back

_DEAD = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"
_OWNED = "SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = 'jobs'::regclass"
_VACUUM = "VACUUM (SKIP_LOCKED) jobs"
# What VACUUM refuses for good on this server: a standby, a role that lost the table.
_REFUSED = (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction,
            psycopg.errors.FeatureNotSupported)


class PostgresVacuum:
    """``tidy``: a part of ``PostgresStorage``; its state is this process's."""

    tidy_dead = TIDY_DEAD

    def __init__(self, db: Database) -> None:
        self._db = db
        self._tidy_clock: Callable[[], float] = time.monotonic
        self._tidy_next = 0.0
        self._tidy_held = 0.0
        self._tidy_owner: bool | None = None

    @reads
    def tidy(self) -> bool:
        """Vacuum ``jobs`` if its dead row versions passed ``tidy_dead``; whether it did."""
        if (not self._db.settings.vacuum or self._tidy_owner is False
                or self._tidy_clock() < self._tidy_next):
            return False
        conn = self._db.read()
        if _dead(conn) < self.tidy_dead:
            return False
        if self._tidy_owner is None:
            row = conn.execute(_OWNED).fetchone()
            self._tidy_owner = bool(row and row[0])
            if not self._tidy_owner:
                log.info("this role does not own the jobs table: autovacuum alone vacuums it")
                return False
        started = self._tidy_clock()
        try:
            conn.execute(_VACUUM)
        except _REFUSED as exc:
            self._tidy_owner = False
            log.warning("VACUUM of the jobs table refused (%s): left to autovacuum",
                        str(exc).strip().splitlines()[0])
            return False
        took = self._tidy_clock() - started
        # Versions still dead: a snapshot older than them holds them; try again later.
        held = _dead(conn) >= self.tidy_dead
        self._tidy_held = min(max(2 * self._tidy_held, 2 * MIN_GAP), HELD_MAX) if held else 0.0
        self._tidy_next = self._tidy_clock() + max(MIN_GAP, SHARE * took, self._tidy_held)
        return True


def _dead(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(_DEAD).fetchone()
    return int(row[0]) if row and row[0] is not None else 0
