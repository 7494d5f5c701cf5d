"""PostgreSQL migrations: versioned, in the schema the URL names, safe when several processes
open a fresh database at once, and run by ``conveyor migrate`` without naming the backend."""

from __future__ import annotations

import multiprocessing
import uuid
from typing import Any

import psycopg
import pytest

from conveyor.cli.main import main
from conveyor.errors import StorageURLError
from conveyor.storage import open_storage
from conveyor.storage.postgres.connection import parse_postgres_url
from conveyor.storage.postgres.migrate import latest_version
from tests.conformance.helpers import put, take_one


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
    url = _url(postgres_server)
    assert main(["migrate", "--url", url]) == 0
    assert "is up to date" in capsys.readouterr().out
    assert _versions(url) == list(range(1, latest_version() + 1))
    assert main(["migrate", "--url", url]) == 0  # again: nothing to do, nothing applied twice
    assert _versions(url) == list(range(1, latest_version() + 1))


def test_processes_opening_a_fresh_schema_at_once_migrate_it_once(postgres_server: Any) -> None:
    url = _url(postgres_server)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_and_close, args=(url,)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert _versions(url) == list(range(1, latest_version() + 1))
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


@pytest.mark.parametrize("query", ["schema=a-b", "schema=1abc", "listen=maybe"])
def test_bad_options_are_refused_with_a_reason(query: str) -> None:
    with pytest.raises(StorageURLError):
        open_storage(f"postgresql://u:secret@127.0.0.1:1/db?{query}")
