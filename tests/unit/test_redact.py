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
])
def test_every_credential_is_masked(url: str, shown: str) -> None:
    assert redact(url) == shown
    for secret in url_secrets(url):
        assert secret not in redact(url).replace("***", "")


def test_secrets_are_listed_raw_and_decoded() -> None:
    assert sorted(url_secrets("redis://:p%40ss@h/0?password=two")) == ["p%40ss", "p@ss", "two"]
    assert url_secrets("redis://h/0?prefix=p") == []
