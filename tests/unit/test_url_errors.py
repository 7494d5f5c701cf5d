"""Malformed storage and broker URLs (issue 49, LOW): each is one line naming the problem,
exit 2 from the CLI, never an "internal error" and never a password; options reach their
client as written.

Expectation from libpq's own ``psql`` and redis-cli, which answer a malformed URI with one
line and no traceback, and from every peer's rule that a password is never logged (Celery
masks ``broker_url`` passwords, Sidekiq redacts ``REDIS_URL``): conveyor masks whatever
carries a credential, librdkafka's dotted settings too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from conveyor.broker import open_broker
from conveyor.errors import BrokerURLError, StorageURLError
from conveyor.storage import open_storage
from conveyor.storage.postgres.connection import parse_postgres_url

SECRET = "S3cr3t"
CONVEYOR = str(Path(sys.executable).with_name("conveyor"))


@pytest.mark.parametrize("url", [
    f"postgresql://u:{SECRET}@[::1:5432/db",
    f"postgresql://u:{SECRET}%zz@localhost:5432/db",
    f"postgresql://u:%zz{SECRET}@localhost:5432/db?sslmode=require",
])
def test_a_malformed_postgres_url_never_shows_its_password(url: str) -> None:
    """libpq's message quoted the URI, password included."""
    with pytest.raises(StorageURLError) as refused:
        parse_postgres_url(url)
    text = str(refused.value)
    assert SECRET not in text and "malformed" in text and "\n" not in text


@pytest.mark.parametrize(("schema", "why"), [
    ("conveyor%0A", "not a plain identifier"), ("conv%20eyor", "not a plain identifier"),
    ("information_schema", "PostgreSQL's own"), ("pg_catalog", "PostgreSQL's own"),
    ("PG_TOAST", "PostgreSQL's own"),
])
def test_schema_names_are_plain_and_conveyors_own(schema: str, why: str) -> None:
    with pytest.raises(StorageURLError, match=why):
        parse_postgres_url(f"postgresql://u:{SECRET}@h/db?schema={schema}")
    assert parse_postgres_url("postgresql://h/db?schema=Jobs_2").schema == "jobs_2"


def test_libpq_options_reach_libpq_as_written() -> None:
    """``?options=-c%20statement_timeout%3D1ms`` was re-encoded with ``+``, which libpq
    reads as a plus sign: the server got ``-c+statement_timeout=1ms``."""
    settings = parse_postgres_url(
        "postgresql://u:p@h/db?options=-c%20statement_timeout%3D1500ms&application_name=a+b"
        "&schema=s")
    parsed = conninfo_to_dict(settings.conninfo)
    assert parsed["options"] == "-c statement_timeout=1500ms"
    assert parsed["application_name"] == "a b"  # a form's "+" is a space, as before
    assert parsed["password"] == "p" and parsed["connect_timeout"] == "10"


@pytest.mark.parametrize("url", [
    f"redis://:{SECRET}@[::1/0", f"redis://u:{SECRET}@[zz]/0",
    f"redis+cluster://u:{SECRET}@[::1:7000", f"redis+sentinel://u:{SECRET}@[::1/m",
    f"redis://u:{SECRET}@h:6379/0?socket_timeout=abc",
    f"redis://u:{SECRET}@h:6379/0?health_check_interval=x",
    f"redis+sentinel://u:{SECRET}@h/m?socket_timeout=x", f"redis://u:{SECRET}@h:0/0",
])
def test_a_malformed_redis_url_is_one_line(url: str) -> None:
    """These were "internal error: ValueError: Invalid IPv6 URL" and the like."""
    with pytest.raises(StorageURLError) as refused:
        open_storage(url)
    assert SECRET not in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("url", [
    f"amqp://u:{SECRET}@[::1/", f"amqp://u:{SECRET}@[zz]/", f"amqp://u:{SECRET}@h:99999/",
    f"amqp://u:{SECRET}@h:x/", f"amqp://u:{SECRET}@h:0/",
    f"kafka://u:{SECRET}@[::1", f"kafka://u:{SECRET}@h:x", f"kafka://u:{SECRET}@h:70000",
    f"kafka://u:{SECRET}@h1:9092,[::1]:x",
    f"kafka://u:{SECRET}@127.0.0.1:1?sasl.mechanism=BOGUS",
    f"kafka://u:{SECRET}@127.0.0.1:1?socket.timeout.ms=soon&sasl.password={SECRET}",
])
def test_a_malformed_broker_url_is_one_line(url: str) -> None:
    """Refused before any connection, as a URL error, without the password (librdkafka's
    refusal of a setting was a raw ``KafkaException``: "internal error")."""
    with pytest.raises(BrokerURLError) as refused:
        open_broker(url)
    assert SECRET not in str(refused.value) and "\n" not in str(refused.value)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CONVEYOR, *args], capture_output=True, text=True, timeout=60)


def test_a_url_where_none_was_expected_is_masked_in_the_usage_error() -> None:
    for args in (["stats", f"postgresql://u:{SECRET}@h/db"], [f"redis://:{SECRET}@h/0"],
                 ["jobs", "list", f"kafka://k?sasl.password={SECRET}"],
                 ["stats", f"postgresql://u:{SECRET} with a space@h/db"]):
        done = _cli(*args)
        assert done.returncode == 2 and SECRET not in done.stderr, done.stderr
        assert "***" in done.stderr


def test_a_malformed_url_from_the_cli_is_one_line_and_exit_2() -> None:
    done = _cli("stats", "--url", f"redis://:{SECRET}@[::1/0")
    assert done.returncode == 2
    assert done.stderr.startswith("conveyor: error: Redis URL") and "internal" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and SECRET not in done.stderr
