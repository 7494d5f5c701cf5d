"""PostgreSQL migrations: versioned, in the schema the URL names, safe when several processes
open a fresh database at once, and run by ``conveyor migrate`` without naming the backend."""

from __future__ import annotations

import json
import multiprocessing
import uuid
from typing import Any

import psycopg
import pytest

from conveyor.cli.main import main
from conveyor.core.job import Ack, BatchSpec, EnqueueResult, JobSpec, JobState, Outcome
from conveyor.errors import StorageURLError
from conveyor.storage import open_storage, redact
from conveyor.storage.postgres import acks, jobs
from conveyor.storage.postgres import graph as graph_sql
from conveyor.storage.postgres.connection import parse_postgres_url
from conveyor.storage.postgres.migrate import functions, latest_version, migrations
from conveyor.storage.workers import WorkerInfo
from tests.conformance.helpers import ack, put, take_one
from tests.postgres.old_schema import old_release, store_workflow

_SHIPPED = [number for number, _, _ in migrations()]  # numbers need not be consecutive


def _url(server: Any) -> str:
    return f"{server.url}?schema=m{uuid.uuid4().hex[:10]}"


def _versions(url: str) -> list[int]:
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as db:
        rows = db.execute(f'SELECT version FROM "{settings.schema}".schema_version '
                          "ORDER BY version").fetchall()
    return [r[0] for r in rows]


def _open_and_close(url: str) -> None:
    open_storage(url).close()


def test_conveyor_migrate_creates_the_schema_at_the_latest_version(
        postgres_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``conveyor migrate`` lists what it applied (Django's ``migrate`` prints "Applying
    app.0001_initial... OK" per migration, Alembic logs "Running upgrade"): on a fresh schema
    every shipped migration by name and every function file, then, run again, that nothing
    was left (issue 51: a fresh schema said only "up to date"), and a function file whose
    checksum changed alone (issue 52)."""
    url = _url(postgres_server)
    assert main(["migrate", "--url", url]) == 0
    out = capsys.readouterr().out
    names = [name for _, name, _ in migrations()]
    files = [f"functions/{name}.sql" for name, _, _ in functions()]
    assert out.strip().endswith(f"function file(s) to {redact(url)}: "
                                f"{', '.join(names + files)}")
    assert out.startswith(f"applied {len(names)} migration(s) and {len(files)} function file(s)")
    assert _versions(url) == _SHIPPED
    assert main(["migrate", "--url", url]) == 0  # again: nothing to do, nothing applied twice
    assert "is up to date (no migration to apply)" in capsys.readouterr().out
    assert _versions(url) == _SHIPPED
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as db:  # as a new release's file
        db.execute(f'UPDATE "{settings.schema}".function_version SET checksum = %s '
                   "WHERE name = 'heartbeat'", ("changed",))
    assert main(["migrate", "--url", url]) == 0
    assert capsys.readouterr().out.endswith(
        f"applied 1 function file(s) to {redact(url)}: functions/heartbeat.sql\n")


def test_a_command_that_only_reads_creates_no_schema(
        postgres_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A read of a schema nobody created is one line, exit 2, and leaves no schema behind
    (issue 51: every open migrated, so a typo in ``?schema=`` made a new empty one)."""
    url = _url(postgres_server)
    schema = parse_postgres_url(url).schema
    assert main(["stats", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no conveyor schema '{schema}'" in err
    assert "nothing was created" in err and "from --url" in err
    with psycopg.connect(parse_postgres_url(url).conninfo, autocommit=True) as db:
        found = db.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                           (schema,)).fetchall()
    assert found == []


def test_processes_opening_a_fresh_schema_at_once_migrate_it_once(postgres_server: Any) -> None:
    url = _url(postgres_server)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_and_close, args=(url,)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert _versions(url) == _SHIPPED
    store = open_storage(url)
    try:
        job_id = put(store)
        assert take_one(store).id == job_id
    finally:
        store.close()


def test_two_schemas_in_one_database_do_not_see_each_other(postgres_server: Any) -> None:
    first, second = open_storage(_url(postgres_server)), open_storage(_url(postgres_server))
    try:
        put(first)
        assert first.count_jobs() == 1 and second.count_jobs() == 0
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("query", ["schema=a-b", "schema=1abc", "listen=maybe", "vacuum=2"])
def test_bad_options_are_refused_with_a_reason(query: str) -> None:
    with pytest.raises(StorageURLError, match=query.split("=")[0]) as caught:
        open_storage(f"postgresql://u:secret@127.0.0.1:1/db?{query}")
    assert "secret" not in str(caught.value)


def test_a_database_at_version_1_upgrades_in_place_keeping_every_job(
        postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    url = _url(postgres_server)
    old_release(monkeypatch, url, 1)
    old = open_storage(url)  # version 1: the tables only, transitions written by the client
    monkeypatch.undo()
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as db:
        db.execute(f'SET search_path TO "{settings.schema}"')
        db.execute("INSERT INTO batches (id, callbacks, created_at, closed, total, n_pending) "
                   "VALUES ('b1', %s, 1.0, true, 1, 1)", (json.dumps({"complete": {
                       "id": "cb1", "name": "t.done", "queue": "default", "payload": "[]",
                       "max_retries": 3, "batch_id": None, "flow": None}}),))
        for job_id, state, batch in (("j1", "pending", "b1"), ("j2", "pending", None),
                                     ("j3", "succeeded", None), ("j4", "scheduled", None)):
            db.execute(
                "INSERT INTO jobs (id, name, queue, payload, state, created_at, ready_at, "
                "run_at, batch_id, events) VALUES (%s, 't.x', 'default', '[]', %s, 1.0, 1.0, "
                "%s, %s, '{\"t\":1.0,\"k\":\"enqueued\",\"s\":\"pending\"}\n')",
                (job_id, state, 9e9 if state == "scheduled" else None, batch))
    old.close()
    assert _versions(url) == [1]
    store = open_storage(url)
    try:
        assert _versions(url) == _SHIPPED
        assert {r.id: r.state.value for r in store.list_jobs(limit=10)} == {
            "j1": "pending", "j2": "pending", "j3": "succeeded", "j4": "scheduled"}
        leased = store.dequeue(["default"], "w1", 10, 30.0)
        assert [job.id for job in leased] == ["j1", "j2"]
        assert store.ack([Ack(job.id, job.token, Outcome.SUCCEEDED) for job in leased]) == [
            True, True]
        batch = store.get_batch("b1")
        assert batch is not None and batch.finished_at is not None
        assert batch.callbacks_fired == ("complete",)
        callback = store.get_job("cb1")
        assert callback is not None and callback.state.value == "pending"
        record = store.get_job("j1")
        assert record is not None and [e.kind for e in record.events or []] == [
            "enqueued", "started", "succeeded"]
    finally:
        store.close()


def _generic_one(cur: Any, now: float | None, job_id: str, name: str, queue: str,
                 payload: str, max_retries: int, timeout: float | None,
                 deadline: float | None, run_at: float | None, batch_id: str | None,
                 schema: str | None) -> list[EnqueueResult]:
    spec = JobSpec(id=job_id, name=name, queue=queue, payload=payload,
                   max_retries=max_retries, timeout=timeout, deadline=deadline, run_at=run_at,
                   batch_id=batch_id)
    return jobs.insert(cur, now, [spec, spec], schema)[:1]  # two: not the lean path


def test_a_database_at_version_2_upgrades_in_place_keeping_every_job_and_lease(
        postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    url = _url(postgres_server)
    old_release(monkeypatch, url, 2)
    # the code of version 2's time enqueued one job with the generic function too, and its
    # ack asked nothing of workflows (version 8)
    monkeypatch.setattr(jobs, "_insert_one", _generic_one)
    monkeypatch.setattr(acks, "_ACK", acks._ACK.replace(", wf_pending(), wake_waiters()", ""))
    old = open_storage(url)  # version 2: the functions, and the indexes of version 1
    done, running, waiting = put(old), put(old), put(old)
    later = put(old, run_at=9e9)
    lost = put(old, queue="other")
    assert ack(old, take_one(old))
    held = take_one(old)
    assert held.id == running
    assert take_one(old, ["other"], lease=0.0).id == lost  # its lease expires at once
    old.create_batch(BatchSpec(id="b2"))
    in_batch = [put(old, "batch", batch_id="b2") for _ in range(3)]
    old.close_batch("b2")
    running_in_batch = take_one(old, ["batch"])
    old.close()
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo) as conn:  # read as version 2 stored it
        [(started_at,)] = conn.execute(
            f'SELECT started_at FROM "{settings.schema}".batches WHERE id = %s',
            ("b2",)).fetchall()
    assert started_at is not None
    monkeypatch.undo()
    assert _versions(url) == [1, 2]
    store = open_storage(url)
    try:
        assert _versions(url) == _SHIPPED
        states = {r.id: r.state.value for r in store.list_jobs(limit=20)}
        assert states == {done: "succeeded", running: "active", waiting: "pending",
                          later: "scheduled", lost: "active", running_in_batch.id: "active",
                          in_batch[1]: "pending", in_batch[2]: "pending"}
        assert [store.count_jobs(state=JobState(s)) for s in (
            "pending", "active", "scheduled", "succeeded")] == [3, 3, 1, 1]
        sizes = {(q.name, q.pending, q.active, q.scheduled) for q in store.queues()}
        assert sizes == {("default", 1, 1, 1), ("other", 0, 1, 0), ("batch", 2, 1, 0)}
        # the lease taken before the upgrade still fences: the wrong token is refused
        assert store.ack([Ack(running, "not-the-token", Outcome.SUCCEEDED)]) == [False]
        assert store.heartbeat(WorkerInfo(id="w1", hostname="h", pid=1, queues=("default",),
                                          concurrency=1, started_at=0.0),
                               {held.id: held.token}, 30.0).lost == frozenset()
        assert ack(store, held)
        assert store.reclaim_expired() == 1  # the expired lease, found without jobs_lease
        assert [j.id for j in store.dequeue(["default", "other"], "w2", 5, 30.0)] == [
            waiting, lost]
        assert store.count_jobs(state=JobState.SUCCEEDED) == 2
        # the batch's counters read the same after the upgrade, and go on moving
        batch = store.get_batch("b2")
        assert batch is not None and (batch.counts["pending"], batch.counts["active"]) == (2, 1)
        assert ack(store, running_in_batch)
        rest = store.dequeue(["batch"], "w2", 5, 30.0)
        assert sorted(j.id for j in rest) == sorted(in_batch[1:])
        batch = store.get_batch("b2")
        assert batch is not None and batch.started_at == started_at
        assert (batch.counts["pending"], batch.counts["active"], batch.counts["succeeded"]) == (
            0, 2, 1)
        assert store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in rest]) == [True] * 2
        done_batch = store.get_batch("b2")
        assert done_batch is not None and done_batch.complete
        assert done_batch.counts["succeeded"] == 3 and done_batch.counts["active"] == 0
    finally:
        store.close()


def test_a_migration_numbered_below_one_already_applied_is_still_applied(
        postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two branches may each add a migration (N+1 and N+2): a database that got N+2 first
    gets N+1 when it ships, instead of skipping it for being below the highest applied."""
    url = _url(postgres_server)
    n = latest_version()
    shipped = migrations()
    ahead = (n + 2, f"{n + 2:03d}_ahead.sql", "CREATE TABLE ahead (a integer);")
    late = (n + 1, f"{n + 1:03d}_late.sql", "CREATE TABLE late_arrival (a integer);")
    monkeypatch.setattr("conveyor.storage.postgres.migrate.migrations",
                        lambda: sorted([*shipped, ahead]))
    open_storage(url).close()
    assert _versions(url) == [*_SHIPPED, n + 2]
    monkeypatch.setattr("conveyor.storage.postgres.migrate.migrations",
                        lambda: sorted([*shipped, late, ahead]))
    open_storage(url).close()
    assert _versions(url) == [*_SHIPPED, n + 1, n + 2]
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as db:
        assert db.execute(f'SELECT count(*) FROM "{settings.schema}".late_arrival'
                          ).fetchone() == (0,)


def test_a_worker_of_the_previous_release_still_starts_jobs_after_migration_7(
        postgres_server: Any) -> None:
    """Migration 7 gave ``start`` a message-id argument; the old signature stays, so a worker
    not yet upgraded keeps working (its messages have no ids: a redelivery takes over)."""
    url = _url(postgres_server)
    store = open_storage(url)
    try:
        job_id = put(store)
        settings = parse_postgres_url(url)
        old_call = ("SELECT kind, token, recoveries FROM start(NULL::float8, 'default', "
                    "%s::text[], %s::bool[], 'w-old', 30::float8, 5, 'why', 'cancelled')")
        with psycopg.connect(settings.conninfo, autocommit=True) as db:
            db.execute(f'SET search_path TO "{settings.schema}"')
            first = db.execute(old_call, ([job_id], [False])).fetchone()
            again = db.execute(old_call, ([job_id], [True])).fetchone()
        assert first is not None and first[0] == "started" and "#" not in first[1]
        assert again is not None and again[0] == "started" and again[2] == 1
    finally:
        store.close()


def test_a_workflow_stored_before_migration_15_still_releases_its_children(
        postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 15 fires the mark trigger for the jobs flagged as nodes only: it flags the
    nodes already stored, so a workflow in flight across the upgrade goes on."""
    url = _url(postgres_server)
    old_release(monkeypatch, url, 14)
    # the code of version 14's time wrote no flag
    monkeypatch.setattr(graph_sql, "store", _store_without_flag)
    old = open_storage(url)
    _, child = store_workflow(old)
    old.close()
    monkeypatch.undo()
    assert 15 not in _versions(url)
    store = open_storage(url)
    try:
        assert _versions(url) == _SHIPPED
        assert ack(store, take_one(store, ["wf"]))
        assert take_one(store, ["wf"]).id == child
    finally:
        store.close()


def _store_without_flag(cur: Any, now: float, specs: Any, results: Any) -> None:
    """postgres/graph.py's ``store`` as version 14 ran it: no ``wf`` column to set."""
    created = [s for s, r in zip(specs, results, strict=True) if r.created and s.node]
    cur.executemany("INSERT INTO wf_nodes (id, node, unsettled) VALUES (%s, %s, %s)",
                    [(s.id, json.dumps(s.node.to_wire()), len(s.node.parents)) for s in created])
    cur.execute("UPDATE jobs SET state = 'waiting', ready_at = NULL WHERE id = ANY(%s)",
                ([s.id for s in created if s.waits],))
    rows = [("g", "pending", "waiting") for s in created if s.waits]
    graph_sql.batches.apply(cur, now, rows)


def test_jobs_published_before_migration_17_start_after_it(
        postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migration 17 replaces ``start`` and ``publish_due``: jobs a relay stamped on version 16
    start through the new function after the upgrade (batch marked started), and a job due
    again is picked by the new ``publish_due``."""
    url = _url(postgres_server)
    old_release(monkeypatch, url, 16)
    old = open_storage(url)
    old.create_batch(BatchSpec(id="b"))
    ids = [f"j{i}-{uuid.uuid4().hex}" for i in range(3)]
    old.enqueue([JobSpec(id=job_id, name="t.x", queue="default", payload="[]", batch_id="b")
                 for job_id in ids])
    assert old.publish_due("default", 2, 300.0) == ids[:2]  # type: ignore[attr-defined]
    old.close()
    monkeypatch.undo()
    assert 17 not in _versions(url)
    store = open_storage(url)
    try:
        assert _versions(url) == _SHIPPED
        replies = store.start("default", [(ids[0], False), (ids[1], False)],  # type: ignore[attr-defined]
                              "w1", 30.0)
        assert [(r.job_id, r.kind.value) for r in replies] == [(ids[0], "started"),
                                                               (ids[1], "started")]
        batch = store.get_batch("b")
        assert batch is not None and batch.started_at is not None
        assert store.publish_due("default", 5, 300.0) == ids[2:]  # type: ignore[attr-defined]
    finally:
        store.close()
