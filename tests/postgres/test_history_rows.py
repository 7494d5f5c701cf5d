"""The per-minute history on PostgreSQL: rows of ``minute_totals``, deleted by ``trim`` once
older than a day (the conformance suite covers what ``Inspector.history`` reports)."""

from __future__ import annotations

import uuid
from typing import Any

from conveyor.core.clock import FakeClock
from conveyor.storage import Retention, open_storage
from conveyor.storage.postgres.storage import PostgresStorage
from conveyor.storage.totals import minute_of
from tests.conformance.helpers import outcome_a_day
from tests.postgres import schema_conn


def test_postgres_trim_deletes_minutes_older_than_a_day(postgres_server: Any) -> None:
    clock = FakeClock()
    store = open_storage(f"{postgres_server.url}?schema=h{uuid.uuid4().hex[:10]}", clock)
    assert isinstance(store, PostgresStorage)
    try:
        outcome_a_day(store, clock)
        with schema_conn(store) as conn:
            rows = "SELECT count(*) FROM minute_totals"
            assert conn.execute(rows).fetchone()[0] == 3  # type: ignore[index]
            store.trim(Retention())
            assert conn.execute(rows).fetchone()[0] == 1  # type: ignore[index]
        assert [(r.minute, r.processed) for r in store.history()] == [(minute_of(clock.now()), 1)]
    finally:
        store.close()
