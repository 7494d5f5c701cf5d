"""Schemas as the releases before function files left them, for the upgrade tests.

``old_migrations/`` holds the PostgreSQL migrations exactly as they shipped up to version 18
(``git show 1b443fd:src/conveyor/storage/postgres/migrations/NNN_name.sql``), when each
change to a function re-declared it whole in a new migration. They are data, never edited:
the history a database in the field went through. ``build`` applies them as that release's
runner did (one transaction per migration, recorded in ``schema_version``), so a test can
hold a database at any shipped version and open it with the code of today.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conveyor.core.job import BatchSpec, JobSpec, Node
from conveyor.storage import Backend
from conveyor.storage.postgres.connection import parse_postgres_url

OLD_MIGRATIONS = Path(__file__).with_name("old_migrations")
OLDEST, NEWEST = 1, 18  # the versions shipped before function files


def build(url: str, version: int) -> None:
    """Create the URL's schema at shipped ``version`` (every old migration up to it)."""
    settings = parse_postgres_url(url)
    schema = settings.schema
    with psycopg.connect(settings.conninfo, autocommit=True) as db:
        db.execute(f'CREATE SCHEMA "{schema}"')
        db.execute(f'CREATE TABLE "{schema}".schema_version (version integer PRIMARY KEY, '
                   "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        for path in sorted(OLD_MIGRATIONS.glob("*.sql")):
            number = int(path.name.split("_", 1)[0])
            if number > version:
                break
            with db.transaction():
                db.execute(f'SET LOCAL search_path TO "{schema}"')
                db.execute(path.read_bytes())  # several statements: the simple protocol
                db.execute(f'INSERT INTO "{schema}".schema_version (version, name) '
                           "VALUES (%s, %s)", (number, path.name))


def old_release(monkeypatch: pytest.MonkeyPatch, url: str, version: int) -> None:
    """Build the schema at ``version`` and open storages on it without migrating, as the
    release of that version did, until ``monkeypatch.undo()``."""
    build(url, version)
    monkeypatch.setattr("conveyor.storage.postgres.storage.migrate", _leave_as_is)
    monkeypatch.setattr("conveyor.storage.postgres.storage._DEQUEUE", _OLD_DEQUEUE)


# Those releases' dequeue took no capacity and every job cost 1 (migration 022 changed its
# arguments): today's call, the capacity it passes last read and left unused.
_OLD_DEQUEUE = ("SELECT d.*, c.cost FROM dequeue(%s::float8, %s::text[], %s::text, %s::int4, "
                "%s::float8) AS d CROSS JOIN (SELECT 1 + 0 * %s::int4) AS c(cost)")


def _leave_as_is(*_args: Any, **_kwargs: Any) -> int:
    return 0


def store_workflow(store: Backend) -> tuple[str, str]:
    """A workflow ``g`` of two nodes on queue ``wf``, as every release since version 8 could
    store one: (parent, pending; child, waiting for it)."""
    store.create_batch(BatchSpec(id="g", kind="workflow"))
    parent, child = "parent-" + uuid.uuid4().hex, "child-" + uuid.uuid4().hex
    assert all(r.created for r in store.enqueue([
        JobSpec(id=child, name="t.x", queue="wf", payload="[]", batch_id="g",
                node=Node((parent,), (), "fail", "")),
        JobSpec(id=parent, name="t.x", queue="wf", payload="[]", batch_id="g",
                node=Node((), (child,), "fail", ""))]))
    return parent, child
