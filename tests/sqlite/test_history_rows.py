"""The per-minute history on SQLite: rows of ``minute_totals``, deleted by ``trim`` once older
than a day (the conformance suite covers what ``Inspector.history`` reports)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conveyor.core.clock import FakeClock
from conveyor.storage import Retention, open_storage
from conveyor.storage.totals import minute_of
from tests.conformance.helpers import outcome_a_day


def test_sqlite_trim_deletes_minutes_older_than_a_day(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_storage(f"sqlite:///{tmp_path / 'h.db'}", clock)
    try:
        outcome_a_day(store, clock)
        rows = "SELECT count(*) FROM minute_totals"
        with sqlite3.connect(tmp_path / "h.db") as conn:
            assert conn.execute(rows).fetchone()[0] == 3
            store.trim(Retention())
            assert conn.execute(rows).fetchone()[0] == 1
        assert [(r.minute, r.processed) for r in store.history()] == [(minute_of(clock.now()), 1)]
    finally:
        store.close()
