"""``amqps://``: the broker over TLS, against a private node with a throwaway CA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.broker import open_broker
from conveyor.errors import BrokerUnavailable
from tests.support.certs import make_certs, openssl_installed
from tests.support.rabbitmq import RabbitServer, rabbitmq_installed

pytestmark = pytest.mark.rabbitmq


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RabbitServer, str]]:
    """A node that listens for AMQP over TLS, and the CA that signed its certificate."""
    if not rabbitmq_installed() or not openssl_installed():
        pytest.skip("rabbitmq-server or openssl is not installed (make test installs both)")
    cert, key, ca = make_certs(tmp_path_factory.mktemp("certs"))
    with RabbitServer(tls=(cert, key, ca)) as server:
        yield server, ca


def test_amqps_round_trip_with_the_ca(tls_node: tuple[RabbitServer, str]) -> None:
    server, ca = tls_node
    broker = open_broker(f"{server.tls_url}?cafile={ca}&prefix=tls")
    try:
        assert broker.publish("q", ["a", "b"]) == [True, True]
        got = broker.consume([("q", 0)], 10, 10.0)
        while len(got) < 2:
            more = broker.consume([("q", 0)], 10, 10.0)
            assert more, "the second message never came"
            got += more
        assert sorted(d.job_id for d in got) == ["a", "b"]
        broker.ack(got)
    finally:
        broker.close()


def test_a_certificate_the_client_does_not_trust_is_one_line(
        tls_node: tuple[RabbitServer, str], tmp_path: Path) -> None:
    server, _ = tls_node
    _, _, other_ca = make_certs(tmp_path)  # a CA that did not sign the node's certificate
    with pytest.raises(BrokerUnavailable) as caught:
        open_broker(f"{server.tls_url}?cafile={other_ca}&timeout=5")
    text = str(caught.value)
    assert "\n" not in text and "certificate" in text.lower(), text
    assert "guest:guest" not in text  # the password is masked
