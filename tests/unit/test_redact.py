"""``redact``: every credential form a storage URL can carry is masked wherever it is shown."""

from __future__ import annotations

import pytest

from conveyor.storage import redact, url_secrets


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://user:pw@h/0?password=pw2&prefix=p", "redis://user:***@h/0?password=***&prefix=p"),
    ("redis://h:6379/0?password=pw", "redis://h:6379/0?password=***"),
    ("redis://pw@h/0", "redis://***@h/0"),
    ("rediss://h/0?ssl_ca_certs=/ca.pem&ssl_keyfile_password=Kq9",
     "rediss://h/0?ssl_ca_certs=/ca.pem&ssl_keyfile_password=***"),
    ("redis+cluster://u:Pq9@h1:1,h2:2?sentinel_password=Sq9;token=Tq9",
     "redis+cluster://u:***@h1:1,h2:2?sentinel_password=***&token=***"),
    ("redis://h/0?Password=Xq9&API_KEY=Yq9&secret=Zq9&auth=Wq9",
     "redis://h/0?Password=***&API_KEY=***&secret=***&auth=***"),
    ("redis://:p%40ss@h/0", "redis://:***@h/0"),
    ("redis://:pa/ss@h", "redis://:***@h"),
    ("sqlite:///data/jobs.db?file_mode=0640", "sqlite:///data/jobs.db?file_mode=0640"),
    ("sqlite:///odd@name.db", "sqlite:///odd@name.db"),
    ("memory://", "memory://"),
    # issue 49: librdkafka's secret-bearing settings, named with dots
    ("kafka://k1:9092?sasl.oauthbearer.config=principal%3Dops%20secret%3DS3cr3t",
     "kafka://k1:9092?sasl.oauthbearer.config=***"),
    ("kafkas://k1?ssl.key.pem=-----BEGIN%20PRIVATE%20KEY-----MIIEv&ssl.ca.location=/ca.pem",
     "kafkas://k1?ssl.key.pem=***&ssl.ca.location=/ca.pem"),
    ("kafka://k1?sasl.oauthbearer.client.secret=Cq9&sasl.oauthbearer.extensions=t%3DEq9"
     "&producer.ssl.key.password=Pq9&consumer.sasl.password=Rq9&topic_prefix=jobs",
     "kafka://k1?sasl.oauthbearer.client.secret=***&sasl.oauthbearer.extensions=***"
     "&producer.ssl.key.password=***&consumer.sasl.password=***&topic_prefix=jobs"),
    ("kafka://k1?ssl.keystore.password=Kq9&ssl.certificate.pem=CERT&sasl.mechanism=PLAIN",
     "kafka://k1?ssl.keystore.password=***&ssl.certificate.pem=***&sasl.mechanism=PLAIN"),
])
def test_every_credential_is_masked(url: str, shown: str) -> None:
    assert redact(url) == shown
    for secret in url_secrets(url):
        assert secret not in redact(url).replace("***", "")


def test_secrets_are_listed_raw_and_decoded() -> None:
    assert sorted(url_secrets("redis://:p%40ss@h/0?password=two")) == ["p%40ss", "p@ss", "two"]
    assert url_secrets("redis://h/0?prefix=p") == []
