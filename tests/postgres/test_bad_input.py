"""Bad PostgreSQL input at the command line: each is one clear line on stderr, a non-zero exit
code and no traceback, from ``conveyor jobs list`` and from ``conveyor worker``; a password is
never printed. A worker whose role only reads is warned about at start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conveyor.cli.main import main
from conveyor.storage.postgres.connection import parse_postgres_url
from tests.faults.harness import APP_REF, REPO, conveyor_command
from tests.support.redis_server import free_port


@pytest.fixture(scope="module")
def roles(postgres_server: Any) -> Iterator[dict[str, str]]:
    """URLs for each bad case on the session's server (roles named for this module)."""
    tag = uuid.uuid4().hex[:8]
    names = {"pw": f"pw_{tag}", "weak": f"weak_{tag}", "ro": f"ro_{tag}"}
    admin = psycopg.connect(parse_postgres_url(postgres_server.url).conninfo, autocommit=True)
    admin.execute(f"CREATE ROLE {names['pw']} LOGIN PASSWORD 'right-secret'")
    admin.execute(f"CREATE ROLE {names['weak']} LOGIN")
    admin.execute(f"CREATE ROLE {names['ro']} LOGIN SUPERUSER")
    admin.execute(f"ALTER ROLE {names['ro']} SET default_transaction_read_only = on")
    # The test server trusts every local login: the password role alone must give one.
    hba = Path(postgres_server.data) / "pg_hba.conf"
    original = hba.read_text()
    hba.write_text(f"host all {names['pw']} 127.0.0.1/32 scram-sha-256\n{original}")
    admin.execute("SELECT pg_reload_conf()")
    hostport = postgres_server.url.rsplit("@", 1)[1].rsplit("/", 1)[0]
    locked, migrated = f"l{tag}", f"m{tag}"
    assert main(["migrate", "--url", f"{postgres_server.url}?schema={locked}"]) == 0
    assert main(["migrate", "--url", f"{postgres_server.url}?schema={migrated}"]) == 0
    try:
        yield {
            "unreachable port": f"postgresql://postgres@127.0.0.1:{free_port()}/postgres",
            "unknown host": "postgresql://postgres@no-such-host.invalid/postgres",
            "unknown database": f"postgresql://postgres@{hostport}/no_such_db",
            "wrong password": f"postgresql://{names['pw']}:wrong-secret@{hostport}/postgres",
            "no CREATE on the database": f"postgresql://{names['weak']}@{hostport}/postgres"
                                         f"?schema=fresh{tag}",
            "no USAGE on the schema": f"postgresql://{names['weak']}@{hostport}/postgres"
                                      f"?schema={locked}",
            "not migrated, read-only role": f"postgresql://{names['ro']}@{hostport}/postgres"
                                            f"?schema=fresh{tag}",
            "migrated, read-only role": f"postgresql://{names['ro']}@{hostport}/postgres"
                                        f"?schema={migrated}",
        }
    finally:
        hba.write_text(original)
        admin.execute("SELECT pg_reload_conf()")
        for schema in (locked, migrated):
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        for name in names.values():
            admin.execute(f"DROP ROLE {name}")
        admin.close()


EXPECTED = {
    "unreachable port": "Connection refused",
    "unknown host": "failed to resolve host",
    "unknown database": 'database "no_such_db" does not exist',
    "wrong password": "password authentication failed",
    "no CREATE on the database": "permission denied for database postgres (run conveyor migrate",
    "no USAGE on the schema": "permission denied for schema",
    "not migrated, read-only role": "read-only transaction (this role or server only reads",
}


# Cases whose schema was never created: a worker would create it (and meets the role's
# limits), a command that only reads says it does not exist (issue 51).
NEVER_CREATED = ("no CREATE on the database", "not migrated, read-only role")


def _conveyor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([*conveyor_command(), *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120, check=False)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_input_is_one_clear_line_from_the_cli(
        case: str, roles: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url = roles[case]
    assert main(["jobs", "list", "--url", url]) == 2
    err = capsys.readouterr().err.strip()
    if case in NEVER_CREATED:  # a reading command asks for no schema it would create
        schema = parse_postgres_url(url).schema
        assert err.startswith(f"conveyor: error: no conveyor schema '{schema}'"), err
    else:
        assert err.startswith("conveyor: error: PostgreSQL ") and EXPECTED[case] in err, err
    assert len(err.splitlines()) == 1 and "wrong-secret" not in err
    worker = _conveyor("worker", APP_REF, "--processes", "1", "--url", url)
    assert worker.returncode == 2, worker
    lines = worker.stderr.strip().splitlines()
    assert len(lines) == 1 and EXPECTED[case] in lines[0], worker.stderr
    assert "Traceback" not in worker.stderr and "wrong-secret" not in worker.stderr


@pytest.mark.parametrize("processes", ["1", "2"], ids=["single", "supervised"])
def test_a_worker_whose_role_only_reads_stops_at_start_in_one_line(
        roles: dict[str, str], processes: str) -> None:
    """The listing works (reading is all it does); the worker says in one line that it cannot
    take a job and exits 2, instead of failing every transition afterwards (or a supervisor
    restarting children that cannot work)."""
    url = roles["migrated, read-only role"]
    listing = _conveyor("jobs", "list", "--url", url)
    assert listing.returncode == 0, listing.stderr
    proc = subprocess.Popen(
        [*conveyor_command(), "worker", APP_REF, "--processes", processes, "--url", url],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=120)
    finally:  # a worker that did not stop must not outlive the test, children included
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("conveyor: error:") and "cannot write conveyor's tables" in last
    assert "Traceback" not in stderr
