"""The schema as package data: numbered migrations for tables, one file per function.

Two kinds of file make the schema, and the rule that keeps them apart is what lets a reader
find the code a transition runs in one place:

* ``migrations/NNN_name.sql`` hold tables, indexes and data moves, and nothing else: no
  ``CREATE FUNCTION``, no trigger. Each is applied once, in order, and recorded in
  ``schema_version``. A function whose argument list or result type changes gets a
  migration that drops the old one with ``DROP FUNCTION IF EXISTS`` (``CREATE OR REPLACE``
  cannot change a result type, and a new argument list would add an overload beside the old
  one; a fresh schema never had it); a data move that needs what a
  function computes writes that SQL itself, since functions are applied after the
  migrations and the ones a database has before are those of whatever release it ran.
* ``functions/<name>.sql`` hold the current definition of one function (overloads of one
  name together, or a small concern whose SQL functions name each other), as ``CREATE OR
  REPLACE FUNCTION``, and the triggers that call it. Each is applied whenever its sha256
  differs from the one recorded in ``function_version``, after the migrations, in name
  order; a ``LANGUAGE sql`` function is checked against what exists when it is created, so
  it names only functions of its own file or of a file applied before it.

An upgrade is one transaction: every migration not yet recorded, then every function file
whose checksum changed, under a session advisory lock named after the schema. Processes that
open a fresh database at the same moment wait for each other and none applies anything twice;
an upgrade that fails leaves the database as it was, never its tables at one release and its
functions at another. A database that has every shipped migration and every shipped
function's checksum is recognised by two reads, without the lock: whether its two record
tables exist, then both records in one statement.

Numbers need not be consecutive, and every shipped migration not yet recorded is applied, not
only those above the highest recorded: two branches may each add one (004 and 005), and a
database that got 005 first still gets 004 when it ships. A database that records a migration
this release does not ship was upgraded by a newer release: its functions are that release's,
and this one leaves them alone rather than put older bodies back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import psycopg

from conveyor.errors import StorageMissing
from conveyor.storage import redact
from conveyor.storage.postgres.connection import Settings

_NAME = re.compile(r"^(\d+)_[\w-]+\.sql$")
_FUNCTION = re.compile(r"^([a-z_][a-z0-9_]*)\.sql$")
_TRIGGER_ON = re.compile(r"^CREATE TRIGGER \w+ .*? ON (\w+)", re.MULTILINE)
# Who may read schema_version may read function_version: every open reads both, and the
# workers' role was granted the tables that existed when it was set up (docs/postgres.md).
_GRANTS = ("SELECT a.privilege_type, CASE WHEN a.grantee = 0 THEN 'PUBLIC' "
           "ELSE quote_ident(r.rolname) END FROM pg_class c "
           "CROSS JOIN LATERAL aclexplode(c.relacl) AS a LEFT JOIN pg_roles r ON r.oid = a.grantee "
           "WHERE c.oid = 'schema_version'::regclass AND a.grantee <> c.relowner")


def _shipped(folder: str, pattern: re.Pattern[str]) -> Iterator[tuple[re.Match[str], str]]:
    """(the name's match, SQL text) of each file of a package folder whose name matches."""
    for entry in resources.files("conveyor.storage.postgres").joinpath(folder).iterdir():
        match = pattern.match(entry.name)
        if match:
            yield match, entry.read_text(encoding="utf-8")


def migrations() -> list[tuple[int, str, str]]:
    """(number, file name, SQL text) of every shipped migration, in order."""
    return sorted((int(match.group(1)), match.group(0), text)
                  for match, text in _shipped("migrations", _NAME))


def functions() -> list[tuple[str, str, str]]:
    """(name, sha256, SQL text) of every shipped function file, in name order."""
    return sorted((match.group(1), hashlib.sha256(text.encode()).hexdigest(), text)
                  for match, text in _shipped("functions", _FUNCTION))


def latest_version() -> int:
    """The schema version the shipped migrations lead to."""
    return max((number for number, _, _ in migrations()), default=0)


@dataclass
class Recorded:
    """What a schema says it has: migration numbers and each function file's checksum."""

    versions: set[int] = field(default_factory=set)
    checksums: dict[str, str] = field(default_factory=dict)


def recorded(conn: psycopg.Connection[Any], schema: str) -> Recorded:
    """The schema's record (empty: not created or never migrated), in at most two reads:
    whether its tables exist, then both of them in one statement."""
    row = conn.execute("SELECT to_regclass(%s), to_regclass(%s)",
                       (f'"{schema}".schema_version', f'"{schema}".function_version')).fetchone()
    found = Recorded()
    if row is None or row[0] is None:
        return found
    query = f'SELECT version, NULL, NULL FROM "{schema}".schema_version'
    if row[1] is not None:  # a schema last migrated before function files has none
        query += f' UNION ALL SELECT NULL, name, checksum FROM "{schema}".function_version'
    for version, name, checksum in conn.execute(query):
        if version is not None:
            found.versions.add(int(version))
        else:
            found.checksums[name] = checksum
    return found


def current_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The version the schema is at (0: not created or never migrated)."""
    return max(recorded(conn, schema).versions, default=0)


def _missing(conn: psycopg.Connection[Any], table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    return row is None or row[0] is None


def _due(found: Recorded) -> tuple[list[tuple[int, str, str]], list[tuple[str, str, str]]]:
    """The migrations a schema lacks and the function files whose checksum it lacks (none
    when a newer release migrated it)."""
    shipped = migrations()
    missing = [m for m in shipped if m[0] not in found.versions]
    if found.versions - {number for number, _, _ in shipped}:
        return missing, []
    return missing, [f for f in functions() if found.checksums.get(f[0]) != f[1]]


def migrate(conn: psycopg.Connection[Any], settings: Settings, *, create: bool = True,
            applied: list[str] | None = None) -> int:
    """Bring the schema up to date; returns the version it ends at.

    ``create=False`` refuses (``StorageMissing``) a schema that holds no migration yet;
    ``applied`` receives the file name of each migration applied here, then
    ``functions/<name>.sql`` for each function file."""
    schema = settings.schema
    found = recorded(conn, schema)
    if _due(found) == ([], []):
        return max(found.versions, default=0)
    if not found.versions and not create:
        raise StorageMissing(f"no conveyor schema {schema!r} in {redact(settings.url)} "
                             "(nothing was created)")
    key = f"conveyor-migrate:{schema}"
    names: list[str] = []
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
    try:
        with conn.transaction():
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f'SET LOCAL search_path TO "{schema}"')
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY "
                         "KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
            if _missing(conn, "function_version"):  # fresh, or first upgraded past 18
                conn.execute("CREATE TABLE function_version (name text PRIMARY KEY, checksum "
                             "text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
                for grant in conn.execute(_GRANTS).fetchall():
                    conn.execute(f"GRANT {grant[0]} ON function_version TO {grant[1]}")
            missing, changed = _due(recorded(conn, schema))  # as the lock's last holder left it
            for number, name, script in missing:
                conn.execute(script.encode())  # several statements: the simple protocol
                conn.execute("INSERT INTO schema_version (version, name) VALUES (%s, %s)",
                             (number, name))
                names.append(name)
            tables = sorted({t for _, _, text in changed for t in _TRIGGER_ON.findall(text)},
                            key=lambda table: (table != "jobs", table))
            if tables:
                # Re-creating a trigger takes its table's ACCESS EXCLUSIVE lock: all of them at
                # once, jobs first as the transitions take it. File by file (batches, then
                # jobs) the upgrade would hold batches while waiting for a live ack that holds
                # jobs and asks batches next: a circle PostgreSQL breaks by aborting one.
                conn.execute(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
            for name, checksum, script in changed:
                conn.execute(script.encode())
                conn.execute("INSERT INTO function_version (name, checksum) VALUES (%s, %s) "
                             "ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, "
                             "applied_at = excluded.applied_at", (name, checksum))
                names.append(f"functions/{name}.sql")
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
    if applied is not None:
        applied.extend(names)
    return current_version(conn, schema)
