"""The hot path's statements on PostgreSQL use the indexes made for them, whatever the
planner's statistics say, and those indexes hold no finished job.

Plans are read with ``auto_explain`` (its output sent to the client as notices), from inside
the server-side functions, on a table that was never analyzed: the state of a fresh schema,
or of one a big enqueue has just filled, when a worker's connection plans its statements
once for its whole life.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conveyor.core.ids import new_id
from conveyor.core.job import Ack, BatchSpec, ErrorInfo, FlowControl, JobSpec, Node, Outcome
from conveyor.storage.postgres.storage import PostgresStorage, open_postgres
from tests.postgres import schema_conn

LIVE = ("pending", "active", "scheduled", "retrying", "waiting", "aggregating")
FINISHED = ("succeeded", "failed", "dead", "cancelled")


@pytest.fixture
def store(postgres_server: Any) -> Iterator[PostgresStorage]:
    storage = open_postgres(f"{postgres_server.url}?schema=h{uuid.uuid4().hex[:10]}")
    yield storage
    storage.close()


def _explained(conn: psycopg.Connection[Any]) -> list[str]:
    """From now on, the plan of every statement ``conn`` runs (nested ones included) is
    appended to the list returned."""
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting in ("log_min_duration = 0", "log_nested_statements = on",
                    "log_level = notice"):
        conn.execute(f"SET auto_explain.{setting}")
    return plans


def _plans(conn: psycopg.Connection[Any], statement: str) -> list[str]:
    """The plan of every statement ``statement`` runs, nested ones included."""
    plans = _explained(conn)
    conn.execute(statement)
    return plans


def test_a_lease_walks_the_ready_index_on_a_table_never_analyzed(
        store: PostgresStorage) -> None:
    with schema_conn(store) as conn:  # as many pending jobs as made the planner sort them all
        conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        conn.execute("INSERT INTO jobs (id, name, queue, payload, state, created_at, ready_at) "
                     "SELECT 'j' || g, 't.x', 'default', '[]', 'pending', g, g "
                     "FROM generate_series(1, 60000) AS g")
    with schema_conn(store) as conn:
        assert conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass"
                            ).fetchone() == (-1,)  # never analyzed
        plans = _plans(conn, "SELECT * FROM dequeue(NULL, ARRAY['default'], 'w1', 8, 30, 0)")
    lease = [p for p in plans if "SKIP LOCKED" in p and "ready_at" in p]
    assert lease, plans
    assert "jobs_ready" in lease[0] and "Sort" not in lease[0], lease[0]


def _jobs(n: int) -> list[JobSpec]:
    return [JobSpec(id=new_id(), name="t.x", queue="default", payload="[]") for _ in range(n)]


def test_plans_made_on_a_few_jobs_still_look_jobs_up_by_key_once_thousands_arrive(
        store: PostgresStorage) -> None:
    """A worker's connection plans the hot path at its first calls, on whatever the table
    held then (a fresh schema, an idle queue: a few pages) and keeps those plans until
    ANALYZE. Looking ids up by a sequential scan was the cheaper plan there, and it read the
    whole table on every lease and ack once a burst of jobs arrived
    (migrations/005_plans.sql)."""
    with schema_conn(store) as conn:  # no autovacuum ANALYZE to re-plan in the middle
        conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
    store.enqueue(_jobs(3))
    first = store.dequeue(["default"], "w1", 8, 30)
    store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in first])  # planned on 3 jobs
    store.enqueue(_jobs(5000))
    # the connection the storage's calls on this thread use
    plans = _explained(store._db.read())
    leased = store.dequeue(["default"], "w1", 8, 30)
    assert store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in leased]) == [True] * 8
    assert any("jobs_pkey" in p for p in plans), plans
    assert not [p for p in plans if "Seq Scan on jobs" in p]


def test_only_the_primary_key_sequence_and_batch_indexes_hold_finished_jobs(
        store: PostgresStorage) -> None:
    """Every other index of ``jobs`` is partial over live states (or, ``jobs_done``, over
    the finished ones only: trimming and counting them), so leasing and acknowledging walk
    indexes whose size does not grow with the finished jobs the table keeps."""
    with schema_conn(store) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'jobs'::regclass"
        ).fetchall()
    whole = {name for name, predicate in rows if predicate is None}
    assert whole == {"jobs_pkey", "jobs_seq"}
    partial = {name: predicate for name, predicate in rows if predicate is not None}
    assert "batch_id IS NOT NULL" in partial.pop("jobs_batch")
    done = partial.pop("jobs_done")
    assert all(f"'{state}'" in done for state in FINISHED), done
    assert not any(f"'{state}'" in done for state in LIVE), done
    for name, predicate in partial.items():
        assert any(f"'{state}'" in predicate for state in LIVE), (name, predicate)
        assert not any(f"'{s}'" in predicate for s in FINISHED), (name, predicate)


def test_the_jobs_table_is_vacuumed_after_a_fixed_number_of_changes(
        store: PostgresStorage) -> None:
    """Not after a share of the table: that share grows with the finished jobs kept, and
    the leased jobs' entries at the head of jobs_ready with it (migrations/003_hot_path.sql)."""
    with schema_conn(store) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass"
                           ).fetchone()
    assert row is not None
    options = dict(option.split("=") for option in row[0])
    assert options["autovacuum_vacuum_scale_factor"] == "0"
    assert options["autovacuum_vacuum_insert_scale_factor"] == "0"
    assert int(options["autovacuum_vacuum_threshold"]) <= 10000


def _lease_plans(store: PostgresStorage, queues: list[str]) -> tuple[list[Any], list[str]]:
    """What one lease call answers, and the plans of the statements it ran."""
    conn = store._db.read()  # the connection the storage's calls on this thread use
    plans = _explained(conn)
    leased = store.dequeue(queues, "w1", 4, 30)
    conn.execute("SET auto_explain.log_min_duration = -1")
    return leased, plans


def test_a_lease_of_plain_jobs_is_one_statement_and_any_other_takes_the_full_path(
        store: PostgresStorage) -> None:
    """Migration 014: a call whose queues hold no job past its deadline and no
    flow-controlled job locks its jobs and leases them, batch start included, with one
    statement (no call of ``dequeue_each`` or ``batch_moves``); a job past its deadline in
    any queue the call names sends the whole call through ``dequeue_each``, as before."""
    store.create_batch(BatchSpec(id="b1"))
    store.enqueue([JobSpec(id=new_id(), name="t.x", queue="default", payload="[]",
                           batch_id="b1") for _ in range(3)])
    leased, plans = _lease_plans(store, ["default"])
    assert len(leased) == 3
    assert not [p for p in plans if "dequeue_each(" in p or "batch_moves(" in p], plans
    assert [p for p in plans if "UPDATE batches SET started_at" in p]
    status = store.get_batch("b1")
    assert status is not None and status.started_at is not None
    store.enqueue([JobSpec(id=new_id(), name="t.x", queue="default", payload="[]"),
                   JobSpec(id=new_id(), name="t.x", queue="late", payload="[]",
                           deadline=time.time() - 1)])
    leased, plans = _lease_plans(store, ["default", "late"])
    assert len(leased) == 1
    assert [p for p in plans if "dequeue_each(" in p], plans


def test_only_a_workflow_s_own_jobs_call_the_mark_trigger(store: PostgresStorage) -> None:
    """Migration 15: the acks of a plain batch's jobs run no lookup in ``wf_nodes`` (the
    trigger's WHEN clause reads the row's ``wf`` flag); a workflow node's ack does, and marks
    the node for its children."""
    store.create_batch(BatchSpec(id="plain"))
    store.enqueue([JobSpec(id=new_id(), name="t.x", queue="default", payload="[]",
                           batch_id="plain") for _ in range(3)])
    store.create_batch(BatchSpec(id="graph", kind="workflow"))
    parent, child = new_id(), new_id()
    store.enqueue([
        JobSpec(id=child, name="t.x", queue="wf", payload="[]", batch_id="graph",
                node=Node((parent,), (), "fail", "")),
        JobSpec(id=parent, name="t.x", queue="wf", payload="[]", batch_id="graph",
                node=Node((), (child,), "fail", ""))])
    conn = store._db.read()
    plans = _explained(conn)
    leased = store.dequeue(["default"], "w1", 5, 30)
    assert store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in leased]) == [True] * 3
    assert not [p for p in plans if "wf_nodes" in p], plans
    [node] = store.dequeue(["wf"], "w1", 5, 30)
    assert node.id == parent
    assert store.ack([Ack(node.id, node.token, Outcome.SUCCEEDED)]) == [True]
    conn.execute("SET auto_explain.log_min_duration = -1")
    assert [p for p in plans if "wf_nodes" in p]
    assert [j.id for j in store.dequeue(["wf"], "w1", 5, 30)] == [child]


def test_only_a_breaker_job_s_lease_and_ack_read_the_breakers(store: PostgresStorage) -> None:
    """Migration 23 (issue 56): jobs without a breaker key lease and ack as before, no
    statement reading ``breakers`` (the usual ack inlines the signature without the list of
    jobs that never ran); a breaker job's error ack moves its breaker in the same call."""
    store.enqueue([JobSpec(id=new_id(), name="t.x", queue="default", payload="[]")
                   for _ in range(3)])
    conn = store._db.read()
    plans = _explained(conn)
    leased = store.dequeue(["default"], "w1", 5, 30)
    assert store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in leased]) == [True] * 3
    assert len(leased) == 3 and not [p for p in plans if _reads_breakers(p)], plans
    assert not [p for p in plans if "Query Text: SELECT ack(p_now" in p], plans
    flow = FlowControl(breaker_key="k", breaker_open_after=1, breaker_within=60.0,
                       breaker_cool_down=30.0)
    store.enqueue([JobSpec(id=new_id(), name="t.x", queue="default", payload="[]", flow=flow)])
    [job] = store.dequeue(["default"], "w1", 5, 30)
    error = ErrorInfo("ValueError", "503")
    assert store.ack([Ack(job.id, job.token, Outcome.RETRY, error=error, retry_in=60.0)]) == [
        True]
    conn.execute("SET auto_explain.log_min_duration = -1")
    assert [p for p in plans if _reads_breakers(p)], plans
    assert [b.state for b in store.breakers()] == ["open"]


def _reads_breakers(plan: str) -> bool:
    """The plan reads or writes the breakers table, or calls a breaker function."""
    return bool(re.search(r"\b(on|using) breakers|breakers_pkey|breaker_(acks|gate|probe)\(",
                          plan))


def test_a_start_of_plain_deliveries_is_one_statement_and_any_other_takes_the_full_path(
        store: PostgresStorage) -> None:
    """Migration 17: a relay's pick of due jobs stamps them in the statement that locks
    them; a start whose deliveries are all plain (pending, ungated, in time, each named once)
    leases them and marks their batch started with one statement after the lock (no call of
    ``start_set``, ``start_each`` or ``batch_moves``); a job named twice sends the whole call
    down the full path, whose replies stay one per delivery, in order."""
    store.create_batch(BatchSpec(id="b1"))
    ids = [new_id() for _ in range(4)]
    store.enqueue([JobSpec(id=job_id, name="t.x", queue="default", payload="[]",
                           batch_id="b1") for job_id in ids])
    conn = store._db.read()  # the connection the storage's calls on this thread use
    plans = _explained(conn)
    assert store.publish_due("default", 10, 300.0) == ids
    assert [p for p in plans if "LockRows" in p and "Update on jobs" in p], plans
    plans.clear()
    replies = store.start("default", [(ids[0], False), (ids[1], False)], "w1", 30.0)
    assert [(r.job_id, r.kind.value) for r in replies] == [(ids[0], "started"),
                                                           (ids[1], "started")]
    assert not [p for p in plans if "start_set(" in p or "start_each(" in p
                or "batch_moves(" in p], plans
    assert [p for p in plans if "UPDATE batches SET started_at" in p], plans
    status = store.get_batch("b1")
    assert status is not None and status.started_at is not None
    plans.clear()
    replies = store.start("default", [(ids[2], False), (ids[3], False), (ids[2], False)],
                          "w1", 30.0)
    conn.execute("SET auto_explain.log_min_duration = -1")
    assert [(r.job_id, r.kind.value) for r in replies] == [
        (ids[2], "started"), (ids[3], "started"), (ids[2], "running")]
    assert [p for p in plans if "start_set(" in p], plans
