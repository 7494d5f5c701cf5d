"""``rediss://``: the storage over TLS, against a redis-server with a throwaway CA."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conveyor.job import Ack, JobSpec, Outcome
from conveyor.storage import open_storage
from tests.redis.conftest import prefixed
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis


def make_certs(tmp_path: Path) -> tuple[str, str, str]:
    """A CA and a server certificate for 127.0.0.1, made with openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed; cannot make a throwaway CA")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", "ext.cnf", "-out", "server.crt")
    return str(tmp_path / "server.crt"), str(tmp_path / "server.key"), str(tmp_path / "ca.crt")


def test_rediss_round_trip(tmp_path: Path) -> None:
    cert, key, ca = make_certs(tmp_path)
    try:
        server = RedisServer(tls=(cert, key, ca)).start()
    except RuntimeError as exc:
        pytest.skip(f"this redis-server cannot serve TLS: {exc}")
    try:
        url = prefixed(server.url) + f"&ssl_ca_certs={ca}"
        store = open_storage(url)
        store.enqueue([JobSpec(id="a", name="t", queue="q", payload="{}")])
        (job,) = store.dequeue(["q"], "w", 1, 30)
        assert store.ack([Ack(job.id, job.token, Outcome.SUCCEEDED)]) == [True]
        store.close()
    finally:
        server.cleanup()
