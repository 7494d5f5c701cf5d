"""Workflow node rows written before releases were marked (``wf_nodes.ended_by`` NULL for a
node the graph released): a retry by hand of such a node that ran keeps the arguments it was
released with, its parents' results not put in front of them again (storage/graph_retry.py
counts a node that ran as released). Written with a raw sqlite3 connection, as an older
version left the row."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conveyor.core.clock import FakeClock
from conveyor.core.job import JobState, Outcome
from conveyor.storage import open_storage
from tests.conformance.test_workflows import Graph


def test_a_node_released_by_an_older_version_is_retried_as_it_ran(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    store = open_storage(f"sqlite:///{db}", FakeClock())
    try:
        g = Graph(store, {"a": [], "b": ["a"]}, results=["b"])
        g.run("a", result=json.dumps(5))
        g.run("b", Outcome.FAILED, message="its own failure")
        with sqlite3.connect(db) as raw:  # the row as an older version wrote it
            assert raw.execute("UPDATE wf_nodes SET ended_by = NULL WHERE id = ?",
                               (g.ids["b"],)).rowcount == 1
        assert store.retry_jobs([g.ids["b"]]) == 1
        record = store.get_job(g.ids["b"])
        assert record is not None and record.state is JobState.PENDING
        assert record.args == [[5], "b"]
    finally:
        store.close()
