"""Numbered schema migrations shipped as package data, tracked with ``PRAGMA user_version``.

``migrations/NNN_name.sql`` files are applied in order, each inside the same ``BEGIN
IMMEDIATE`` transaction that reads the version, so processes opening a fresh file at the same
moment never apply a migration twice.
"""

from __future__ import annotations

import re
import sqlite3
from importlib import resources

_NAME = re.compile(r"^(\d+)_[\w-]+\.sql$")


def migrations() -> list[tuple[int, str, str]]:
    """(number, file name, SQL text) of every shipped migration, in order."""
    found: list[tuple[int, str, str]] = []
    folder = resources.files("conveyor.storage.sqlite").joinpath("migrations")
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def latest_version() -> int:
    """The schema version the shipped migrations lead to."""
    return max((number for number, _, _ in migrations()), default=0)


def split_statements(script: str) -> list[str]:
    """Split a SQL script into complete statements (so they can run inside one transaction)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in buffer.splitlines()
    ):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buffer[:80]!r}")
    return statements


def migrate(conn: sqlite3.Connection, applied: list[str] | None = None) -> int:
    """Bring the database up to the latest schema; returns the version it ends at.

    ``applied`` receives the file name of each migration applied (``conveyor migrate`` lists
    them), once the transaction that applied them has committed."""
    names: list[str] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        for number, name, script in migrations():
            if number <= version:
                continue
            for statement in split_statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number:d}")
            version = number
            names.append(name)
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    if applied is not None:
        applied.extend(names)
    return version
