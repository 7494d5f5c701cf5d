"""The schema's two kinds of file (storage/postgres/migrate.py): numbered migrations for
tables, indexes and data moves; one file per function, applied whenever its checksum changes.

The proof that moving every function out of the migrations changed nothing: a fresh schema
and one upgraded from any shipped version hold the same functions, indexes, tables, columns,
constraints and triggers, to the letter of the server's own catalog; the functions of a fresh
schema are those the shipped migrations left; jobs in flight across the upgrade run on.
Peers: procrastinate keeps ``schema.sql`` (the whole current schema) beside migrations and
tests that the migrations lead to it; Flyway re-applies a repeatable migration whenever its
checksum changes, after the versioned ones.
"""

from __future__ import annotations

import multiprocessing
import re
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from conveyor.core.clock import FakeClock
from conveyor.core.job import Ack, BatchSpec, FlowControl, JobSpec, JobState, Outcome
from conveyor.errors import StorageError
from conveyor.storage import open_storage
from conveyor.storage.postgres.connection import parse_postgres_url
from conveyor.storage.postgres.migrate import functions, migrate, migrations
from conveyor.storage.workers import WorkerInfo
from tests.conformance.helpers import ack, put, spec, state_of, take, take_one
from tests.postgres.old_schema import (
    NEWEST,
    OLD_MIGRATIONS,
    OLDEST,
    build,
    old_release,
    store_workflow,
)

_FUNCTIONS = ("SELECT 'function ' || p.oid::regprocedure, pg_get_functiondef(p.oid) "
              "FROM pg_proc p WHERE p.pronamespace = %(s)s::regnamespace")
_TRIGGERS = ("SELECT 'trigger ' || t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
             "JOIN pg_class c ON c.oid = t.tgrelid "
             "WHERE c.relnamespace = %(s)s::regnamespace AND NOT t.tgisinternal")
_INDEXES = "SELECT 'index ' || indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s"
_COLUMNS = ("SELECT 'column ' || table_name || '.' || column_name, concat_ws(' ', "
            "ordinal_position, data_type, is_nullable, column_default, is_identity) "
            "FROM information_schema.columns WHERE table_schema = %(s)s")
_TABLES = ("SELECT 'table ' || relname, coalesce(array_to_string(reloptions, ','), '') "
           "FROM pg_class WHERE relnamespace = %(s)s::regnamespace AND relkind = 'r'")
_CONSTRAINTS = ("SELECT 'constraint ' || conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE connamespace = %(s)s::regnamespace")


def _url(server: Any) -> str:
    return f"{server.url}?schema=s{uuid.uuid4().hex[:10]}"


def catalog(url: str) -> dict[str, str]:
    """Every definition the server holds for the URL's schema, the schema's name masked."""
    settings = parse_postgres_url(url)
    schema = settings.schema
    found: dict[str, str] = {}
    with psycopg.connect(settings.conninfo, autocommit=True) as db:
        for query in (_FUNCTIONS, _TRIGGERS, _INDEXES, _COLUMNS, _TABLES, _CONSTRAINTS):
            for name, definition in db.execute(query, {"s": schema}):
                found[name.replace(schema, "<schema>")] = definition.replace(schema, "<schema>")
    return found


def _sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as db:
        db.execute(f'SET search_path TO "{settings.schema}"')
        return db.execute(query, params).fetchall()


def test_the_old_migrations_are_the_shipped_history() -> None:
    """The fixture is the history, not a copy to keep in step: every old migration is still
    shipped under its number and name, so a database that recorded it is recognised."""
    old = sorted(p.name for p in OLD_MIGRATIONS.glob("*.sql"))
    assert len(old) == NEWEST - OLDEST + 1
    assert old == [name for number, name, _ in migrations() if number <= NEWEST]


def test_no_migration_defines_a_function_or_a_trigger() -> None:
    """The rule of the two kinds of file (migrate.py): a function defined in a migration would
    be one more version of it beside its file; a trigger there could name a function that,
    on a fresh schema, does not exist yet when the migrations run."""
    defining = re.compile(r"^\s*(CREATE|ALTER)\b[^;]*\b(FUNCTION|TRIGGER|PROCEDURE)\b|^\s*DO\b",
                          re.IGNORECASE | re.MULTILINE)
    found = {name: defining.findall(text) for _, name, text in migrations()}
    assert {name: hits for name, hits in found.items() if hits} == {}
    for name, _, text in functions():
        assert "CREATE FUNCTION" not in text.upper().replace("CREATE OR REPLACE FUNCTION", ""), name


@pytest.fixture(scope="module")
def fresh(postgres_server: Any) -> dict[str, str]:
    """The catalog of a schema created by this release."""
    url = _url(postgres_server)
    open_storage(url).close()
    found = catalog(url)
    assert sum(key.startswith("function ") for key in found) > 30
    assert {k for k in found if k.startswith("trigger ")} == {
        "trigger batches_finished", "trigger jobs_breaker", "trigger jobs_freed",
        "trigger jobs_inserted", "trigger jobs_lined",
        "trigger jobs_pending",
        "trigger queues_resumed", "trigger wf_mark_delete", "trigger wf_mark_move",
        "trigger durable_forget"}
    return found


@pytest.mark.parametrize("version", range(OLDEST, NEWEST + 1))
def test_a_schema_upgraded_from_a_shipped_version_is_a_fresh_one(
        postgres_server: Any, fresh: dict[str, str], version: int) -> None:
    """From every shipped release, the oldest (tables only) to the last that re-declared
    functions in migrations: the same schema as a fresh one, every function to the letter.
    None of the migrations left to run may lean on a function that only a removed body made
    (the triggers of 8 and 15, the renames of 13, 14 and 17, the DROP of 7)."""
    url = _url(postgres_server)
    build(url, version)
    applied: list[str] = []
    open_storage(url, applied=applied).close()
    assert applied == [name for number, name, _ in migrations() if number > version] + [
        f"functions/{name}.sql" for name, _, _ in functions()]
    assert catalog(url) == fresh


#: Functions whose file a later release changed on purpose, their argument list kept (their
#: new body is what a fresh schema and an upgraded one share, checked above): ``ack``
#: schedules a durable job's suspension and wakes one answered meanwhile (issue 55,
#: docs/durable.md), and schedules a ``RetryAfter``'s snooze (issue 56); a queue's lineup
#: (issue 54, docs/scheduling.md) counts costs against concurrency limits (flow_admits,
#: flow_pick through gate_check), leaves lined jobs to lineup_pick (flow_pick) and ages
#: priorities (promote); a broker's relay publishes lined jobs too (publish_due); a job's
#: breaker (issue 56, docs/flow-control.md) holds it back (flow_admits, flow_pick), its probe
#: is marked when a delivery starts it (start_each) and its acks move the breaker (ack).
_ACK_ARGS = ("double precision,text[],text[],text[],text[],text[],text[],text[],text[],text[],"
             "boolean[],text[],text[],text[],integer[],text[],text[],double precision[],text[]")
CHANGED_SINCE_FILES = (f"function <schema>.ack({_ACK_ARGS})", "function <schema>.flow_admits(",
                       "function <schema>.flow_pick(", "function <schema>.promote(",
                       "function <schema>.publish_due(", "function <schema>.start_each(")
#: Functions and triggers whose file came after the last shipped release, or whose argument
#: list changed (migration 022 drops the old one): a durable job's records (issue 55,
#: docs/durable.md); the lineup's walk, gates and trigger, and dequeue with the worker's
#: capacity (issue 54); breakers, and the key rule over a breaker key (migration 023 drops
#: the gates' and broken_key's old argument lists; ``ack`` takes the acks whose job never ran,
#: its old argument list kept for the usual call; issue 56); the end of a run of a keyed job
#: wakes idle workers (jobs_freed: a freed concurrency slot, docs/flow-control.md).
ADDED_SINCE_FILES = ("function <schema>.durable_", "trigger durable_forget",
                     "function <schema>.gate_", "function <schema>.lineup_",
                     "function <schema>.line_job(", "trigger jobs_lined",
                     "function <schema>.dequeue(", "function <schema>.dequeue_each(",
                     "function <schema>.breaker_", "trigger jobs_breaker",
                     "function <schema>.broken_key(", "trigger jobs_freed",
                     f"function <schema>.ack({_ACK_ARGS},integer[])")


def test_the_function_files_define_what_the_shipped_migrations_left(
        postgres_server: Any, fresh: dict[str, str]) -> None:
    """Behaviour-neutral: the last shipped release's schema, not yet upgraded, is a fresh
    schema of today to the letter, but for the table that records the function files, the
    functions changed on purpose since and the functions and triggers added since (their
    files are newer). The migrations numbered after it (019 onwards: tables, columns and
    indexes) define no function (``test_no_migration_defines_a_function_or_a_trigger``), so
    they are applied here as they are, and every other function still comes from the shipped
    migrations alone."""
    url = _url(postgres_server)
    build(url, NEWEST)
    settings = parse_postgres_url(url)
    later = [(number, text) for number, _, text in migrations() if number > NEWEST]
    assert [number for number, _ in later] == list(range(NEWEST + 1, NEWEST + 1 + len(later)))
    with psycopg.connect(settings.conninfo, autocommit=True) as db:
        for _, text in later:
            with db.transaction():
                db.execute(f'SET LOCAL search_path TO "{settings.schema}"')
                db.execute(text.encode())  # several statements: the simple protocol
    shipped = catalog(url)
    kept = {k: v for k, v in shipped.items() if not k.startswith(CHANGED_SINCE_FILES)}
    assert kept == {k: v for k, v in fresh.items() if k in kept}
    assert {k for k in shipped if k not in kept} == {
        k for k in fresh if k.startswith(CHANGED_SINCE_FILES)}
    newer = {k for k in fresh if k not in shipped and "function_version" not in k}
    assert newer == {k for k in fresh if k.startswith(ADDED_SINCE_FILES)}


def _member(key: str) -> JobSpec:
    return spec("agg", name="t.notify", flow=FlowControl(group_key=key, grace=5.0,
                                                         max_delay=60.0, max_size=100))


def test_jobs_in_flight_are_kept_and_run_on_through_the_upgrade(postgres_server: Any,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """A database of the last release holding every kind of live job (pending, scheduled,
    active under a lease, in a batch, a workflow's waiting node, an aggregation group's
    members) upgrades under them: each is where it was, and each runs to its end after."""
    url, clock = _url(postgres_server), FakeClock()
    old_release(monkeypatch, url, NEWEST)
    old = open_storage(url, clock)
    held_id, waiting, later = put(old), put(old), put(old, run_at=clock.now() + 10)
    old.create_batch(BatchSpec(id="b"))
    in_batch = [put(old, "batch", batch_id="b") for _ in range(2)]
    old.close_batch("b")
    _, child = store_workflow(old)
    members = [r.id for r in old.enqueue([_member("k") for _ in range(3)])]
    held = take_one(old)
    assert held.id == held_id
    old.close()
    monkeypatch.undo()
    store = open_storage(url, clock)
    try:
        assert [state_of(store, i) for i in (held_id, waiting, later, child, *members)] == [
            JobState.ACTIVE, JobState.PENDING, JobState.SCHEDULED, JobState.WAITING,
            *[JobState.AGGREGATING] * 3]
        worker = WorkerInfo(id="w1", hostname="h", pid=1, queues=("default",), concurrency=1,
                            started_at=0.0)
        assert store.heartbeat(worker, {held.id: held.token}, 30.0).lost == frozenset()
        assert store.ack([Ack(held.id, "not-the-token", Outcome.SUCCEEDED)]) == [False]
        assert ack(store, held)
        clock.advance(10)
        assert store.promote_due() >= 2  # the scheduled job, the group's lead
        assert [j.id for j in take(store, count=5)] == [waiting, later]
        batch_jobs = take(store, ["batch"], count=5)
        assert sorted(j.id for j in batch_jobs) == sorted(in_batch)
        for job in batch_jobs:
            assert ack(store, job)
        batch = store.get_batch("b")
        assert batch is not None and batch.complete
        assert ack(store, take_one(store, ["wf"]))  # the parent releases its child
        assert ack(store, take_one(store, ["wf"]))
        assert state_of(store, child) is JobState.SUCCEEDED
        lead = take_one(store, ["agg"])
        assert lead.id == members[0]
        gathered = store.gather(lead.id, lead.token)
        assert gathered is not None and [m.id for m in gathered] == members[1:]
        assert store.ack([Ack(j.id, j.token, Outcome.SUCCEEDED) for j in [lead, *gathered]]
                         ) == [True] * 3
    finally:
        store.close()


def _edited(name: str, edit: str) -> list[tuple[str, str, str]]:
    """The shipped function files with ``name``'s changed as a new release would change it."""
    out = []
    for fname, checksum, text in functions():
        if fname == name:
            text = text.replace("$$ SELECT EXISTS", f"$$ /* {edit} */ SELECT EXISTS")
            checksum = f"{checksum}-{edit}"
        out.append((fname, checksum, text))
    return out


def test_a_changed_function_file_is_applied_again_at_the_next_migrate(
        postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose checksum changed is applied, and only it; then nothing is due."""
    url = _url(postgres_server)
    open_storage(url).close()
    monkeypatch.setattr("conveyor.storage.postgres.migrate.functions",
                        lambda: _edited("wf_pending", "edited"))
    applied: list[str] = []
    open_storage(url, applied=applied).close()
    assert applied == ["functions/wf_pending.sql"]
    [(body,)] = _sql(url, "SELECT pg_get_functiondef('wf_pending'::regproc)")
    assert "/* edited */" in body
    again: list[str] = []
    open_storage(url, applied=again).close()
    assert again == []


class _Counting:
    """A connection that records the statements migrate sends."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.sent: list[str] = []

    def execute(self, query: Any, params: Any = None) -> Any:
        self.sent.append(query if isinstance(query, str) else query.decode())
        return self.conn.execute(query, params)


def test_an_up_to_date_schema_is_recognised_by_two_reads_without_the_lock(
        postgres_server: Any) -> None:
    """The fast path: whether the record tables exist, then both records in one statement;
    no lock (the migration lock is held elsewhere throughout, and the open does not wait)."""
    url = _url(postgres_server)
    open_storage(url).close()
    settings = parse_postgres_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as holder, \
            psycopg.connect(settings.conninfo, autocommit=True) as conn:
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))",
                       (f"conveyor-migrate:{settings.schema}",))
        conn.execute("SET lock_timeout = '1s'")  # a wait for the lock would fail, not hang
        counting = _Counting(conn)
        assert migrate(counting, settings, create=False) == max(v for v, _, _ in migrations())  # type: ignore[arg-type]
    assert len(counting.sent) == 2 and all(q.startswith("SELECT") for q in counting.sent)
    assert "function_version" in counting.sent[1] and "schema_version" in counting.sent[1]


def _open_reporting(url: str, results: Any) -> None:
    applied: list[str] = []
    open_storage(url, applied=applied).close()
    results.put(applied)


def test_two_processes_upgrading_at_once_apply_a_function_file_once(
        postgres_server: Any) -> None:
    """Both see the stale checksum, both wait on the migration lock (held here until both
    are queued on it); the first applies the file, the second finds it current."""
    url = _url(postgres_server)
    open_storage(url).close()
    _sql(url, "UPDATE function_version SET checksum = 'stale' WHERE name = 'ack' RETURNING 1")
    settings = parse_postgres_url(url)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    with psycopg.connect(settings.conninfo, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))",
                       (f"conveyor-migrate:{settings.schema}",))
        procs = [ctx.Process(target=_open_reporting, args=(url, results)) for _ in range(2)]
        for proc in procs:
            proc.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        while holder.execute(waiting).fetchone() != (2,):  # both queued on the lock
            assert all(p.is_alive() for p in procs)
            time.sleep(0.05)
        holder.execute("SELECT pg_advisory_unlock_all()")
        reports = sorted([results.get(timeout=60), results.get(timeout=60)])
    for proc in procs:
        proc.join(60)
    assert reports == [[], ["functions/ack.sql"]]
    assert _sql(url, "SELECT checksum FROM function_version WHERE name = 'ack'") == [
        (dict((n, c) for n, c, _ in functions())["ack"],)]


def test_a_schema_a_newer_release_migrated_keeps_its_functions(postgres_server: Any) -> None:
    """A migration this release does not ship means a newer release upgraded the schema:
    its function bodies stay, rather than this release putting older ones back."""
    url = _url(postgres_server)
    open_storage(url).close()
    _sql(url, "INSERT INTO schema_version (version, name) VALUES (999, '999_later.sql') "
              "RETURNING 1")
    _sql(url, "UPDATE function_version SET checksum = 'newer' WHERE name = 'ack' RETURNING 1")
    applied: list[str] = []
    open_storage(url, applied=applied).close()
    assert applied == []
    assert _sql(url, "SELECT checksum FROM function_version WHERE name = 'ack'") == [("newer",)]


def test_a_failed_upgrade_leaves_the_schema_as_its_release_left_it(
        postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upgrade is one transaction: a function file that fails rolls back the migrations
    applied before it, so the tables are never of one release and the functions of another."""
    url = _url(postgres_server)
    build(url, 12)
    before = catalog(url)
    broken = [(n, c, "SELECT no_such_column FROM jobs;" if n == "wf_pending" else t)
              for n, c, t in functions()]
    monkeypatch.setattr("conveyor.storage.postgres.migrate.functions", lambda: broken)
    with pytest.raises(StorageError, match="no_such_column"):
        open_storage(url)
    assert catalog(url) == before
    assert _sql(url, "SELECT max(version) FROM schema_version") == [(12,)]


def test_a_role_granted_the_tables_before_the_upgrade_opens_the_upgraded_schema(
        postgres_server: Any) -> None:
    """docs/postgres.md "Roles": the workers' role is granted the tables that exist, once. The
    upgrade that adds function_version, read by every open, grants it to whoever could read
    schema_version, so those workers start after `conveyor migrate` as they did before."""
    url = _url(postgres_server)
    build(url, NEWEST)
    schema, role = parse_postgres_url(url).schema, f"app_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(parse_postgres_url(url).conninfo, autocommit=True)
    try:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        for grant in (f'USAGE ON SCHEMA "{schema}"',
                      f'SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}"',
                      f'USAGE ON ALL SEQUENCES IN SCHEMA "{schema}"',
                      f'EXECUTE ON ALL FUNCTIONS IN SCHEMA "{schema}"'):
            admin.execute(f"GRANT {grant} TO {role}")
        open_storage(url).close()  # the deploy step, as the owner
        applied: list[str] = []
        worker = open_storage(url.replace("postgresql://postgres@", f"postgresql://{role}@", 1),
                              applied=applied)
        try:
            assert applied == []
            job_id = put(worker, "q")
            assert take_one(worker, ["q"]).id == job_id
        finally:
            worker.close()
    finally:
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")
        admin.close()


def test_an_upgrade_that_recreates_triggers_waits_for_a_live_transition_without_deadlock(
        postgres_server: Any) -> None:
    """Re-creating a trigger takes its table's ACCESS EXCLUSIVE lock. Taken file by file
    (notify_batch_finished.sql on batches, then notify_pending.sql on jobs), the upgrade held
    batches while it waited for jobs, and a live ack, holding jobs and asking batches next,
    closed the circle: PostgreSQL aborted one of them. It locks jobs first, as transitions do."""
    url = _url(postgres_server)
    open_storage(url).close()
    _sql(url, "UPDATE function_version SET checksum = 'stale' "
              "WHERE name IN ('notify_batch_finished', 'notify_pending') RETURNING 1")
    settings = parse_postgres_url(url)
    applied: list[str] = []
    with psycopg.connect(settings.conninfo) as live:  # a transition in flight: jobs, then batches
        live.execute(f'SET search_path TO "{settings.schema}"')
        live.execute("UPDATE jobs SET state = state WHERE false")
        upgrade = threading.Thread(target=lambda: open_storage(url, applied=applied).close())
        upgrade.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
        while live.execute(waiting).fetchone() != (1,):  # the upgrade queued on a table lock
            assert upgrade.is_alive()
            time.sleep(0.05)
        live.execute("UPDATE batches SET closed = closed WHERE false")
        live.commit()
    upgrade.join(60)
    assert applied == ["functions/notify_batch_finished.sql", "functions/notify_pending.sql"]
