"""The hot-path statements are served by their indexes (no table scans), whatever the data.

Dequeue, promotion, lease recovery and retention must stay O(log n) with millions of finished
rows; a query plan that scans ``jobs`` would make them O(n).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conveyor.core.clock import FakeClock
from conveyor.storage.sqlite import acks, leases, storage, upkeep
from conveyor.storage.sqlite.storage import open_sqlite

PLANS: dict[str, tuple[str, Any, str]] = {
    "dequeue": (leases.LEASE_FIRST, {"worker": "w", "now": 1.0, "expires": 2.0,
                                       "queue": "q", "count": 10}, "jobs_ready"),
    "expire": (storage._EXPIRE, ("q", 1.0), "jobs_ready_deadline"),
    "gated": (storage._GATED, ("q",), "jobs_ready_gated"),
    "promote": (upkeep._PROMOTE, (1.0, 10), "jobs_due"),
    "reclaim": (leases.RECLAIM, {"now": 1.0, "limit": 10}, "jobs_lease"),
    "trim": (upkeep._TRIM, (1.0, "succeeded"), "jobs_finished"),
    "ack": (acks._SELECT, ('["a"]',), "sqlite_autoindex_jobs_1"),
}


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    open_sqlite(f"sqlite:///{tmp_path / 'plans.db'}", FakeClock()).close()
    return sqlite3.connect(tmp_path / "plans.db")


@pytest.mark.parametrize("name", sorted(PLANS))
def test_hot_statement_uses_its_index(conn: sqlite3.Connection, name: str) -> None:
    sql, params, index = PLANS[name]
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    assert any(index in step for step in plan), plan
    assert not any(step.startswith("SCAN jobs") for step in plan), plan


def test_release_of_a_worker_reads_only_active_jobs(conn: sqlite3.Connection) -> None:
    """``release_worker`` walks the lease index, which holds active jobs only (a partial
    index): O(jobs running now), never O(jobs stored)."""
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + leases.HELD, ("w",))]
    assert plan == ["SCAN jobs USING INDEX jobs_lease"], plan
    (ddl,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'jobs_lease'").fetchone()
    assert ddl.endswith("WHERE state = 'active'"), ddl
