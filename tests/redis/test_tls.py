"""``rediss://``: the storage over TLS, against a redis-server with a throwaway CA."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor.core.job import Ack, JobSpec, Outcome
from conveyor.storage import open_storage
from tests.redis.conftest import prefixed
from tests.support import certs
from tests.support.certs import openssl_installed
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis


def make_certs(tmp_path: Path) -> tuple[str, str, str]:
    """A CA and a server certificate for 127.0.0.1, made with openssl."""
    if not openssl_installed():
        pytest.skip("openssl is not installed; cannot make a throwaway CA")
    return certs.make_certs(tmp_path)


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
