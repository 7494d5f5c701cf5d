"""Tests of the PostgreSQL backend against a real server (tests/support/postgres_server.py)."""

from __future__ import annotations

from typing import Any

import psycopg

from conveyor.storage.postgres.storage import PostgresStorage


def schema_conn(store: PostgresStorage) -> psycopg.Connection[Any]:
    """A connection of its own (autocommit) to the schema ``store`` uses, for SQL a test
    writes or reads behind the storage's back."""
    settings = store._db.settings
    conn = psycopg.connect(settings.conninfo, autocommit=True)
    conn.execute(f'SET search_path TO "{settings.schema}"')
    return conn
