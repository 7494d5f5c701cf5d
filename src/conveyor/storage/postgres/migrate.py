"""Numbered schema migrations shipped as package data, tracked in ``schema_version``.

``migrations/NNN_name.sql`` files are applied in order, each in its own transaction, under a
session advisory lock named after the schema: processes that start at the same moment on a
fresh database wait for each other, and none applies a migration twice. A database that has
every shipped migration is recognised with one read, without the lock.

Numbers need not be consecutive, and every shipped migration not yet recorded is applied,
not only those above the highest recorded: two branches may each add one (004 and 005), and
a database that got 005 first still gets 004 when it ships.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import psycopg

from conveyor.errors import StorageMissing
from conveyor.storage import redact
from conveyor.storage.postgres.connection import Settings

_NAME = re.compile(r"^(\d+)_[\w-]+\.sql$")


def migrations() -> list[tuple[int, str, str]]:
    """(number, file name, SQL text) of every shipped migration, in order."""
    found: list[tuple[int, str, str]] = []
    folder = resources.files("conveyor.storage.postgres").joinpath("migrations")
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def latest_version() -> int:
    """The schema version the shipped migrations lead to."""
    return max((number for number, _, _ in migrations()), default=0)


def current_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The version the schema is at (0: not created or never migrated)."""
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".schema_version',)).fetchone()
    if row is None or row[0] is None:
        return 0
    found = conn.execute(f'SELECT max(version) FROM "{schema}".schema_version').fetchone()
    return int(found[0] or 0) if found else 0


def applied_versions(conn: psycopg.Connection[Any], schema: str) -> set[int]:
    """The versions recorded in the schema (none: not created or never migrated)."""
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".schema_version',)).fetchone()
    if row is None or row[0] is None:
        return set()
    return {int(r[0]) for r in conn.execute(f'SELECT version FROM "{schema}".schema_version')}


def migrate(conn: psycopg.Connection[Any], settings: Settings, *, create: bool = True,
            applied: list[str] | None = None) -> int:
    """Bring the schema up to the latest version; returns the version it ends at.

    ``create=False`` refuses (``StorageMissing``) a schema that holds no migration yet;
    ``applied`` receives the file name of each migration applied here."""
    schema = settings.schema
    latest = latest_version()
    shipped = {number for number, _, _ in migrations()}
    found = applied_versions(conn, schema)
    if shipped <= found:
        return latest
    if not found and not create:
        raise StorageMissing(f"no conveyor schema {schema!r} in {redact(settings.url)} "
                             "(nothing was created)")
    key = f"conveyor-migrate:{schema}"
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
    try:
        with conn.transaction():
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f'CREATE TABLE IF NOT EXISTS "{schema}".schema_version ('
                         "version integer PRIMARY KEY, name text NOT NULL, "
                         "applied_at timestamptz NOT NULL DEFAULT now())")
        done = applied_versions(conn, schema)
        for number, name, script in migrations():
            if number in done:
                continue
            with conn.transaction():
                conn.execute(f'SET LOCAL search_path TO "{schema}"')
                conn.execute(script.encode())  # several statements: the simple protocol
                conn.execute(f'INSERT INTO "{schema}".schema_version (version, name) '
                             "VALUES (%s, %s)", (number, name))
            if applied is not None:
                applied.append(name)
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
    return current_version(conn, schema)
