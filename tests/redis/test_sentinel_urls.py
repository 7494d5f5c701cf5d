"""``redis+sentinel://`` URLs: Sentinel hosts, primary name, database, logins, wait options."""

from __future__ import annotations

import pytest

from conveyor.errors import StorageURLError
from conveyor.storage import redact
from conveyor.storage.redis.urls import parse_url


def test_sentinel_url_of_the_issue() -> None:
    settings = parse_url("redis+sentinel://:secret@s1:26379,s2:26379,s3:26379/mymaster/0")
    assert settings.sentinel and not settings.cluster
    assert settings.hosts == (("s1", 26379), ("s2", 26379), ("s3", 26379))
    assert settings.service == "mymaster"
    assert settings.options == {"password": "secret", "db": 0}
    assert settings.sentinel_options == {}
    assert settings.prefix == "conveyor" and settings.wait_replicas == 0


def test_default_port_database_and_typed_options() -> None:
    settings = parse_url("redis+sentinel://u:p%40ss@s1,s2:26380/cache/3?prefix=app"
                         "&socket_keepalive=true&sentinel_password=sp&sentinel_username=su")
    assert settings.hosts == (("s1", 26379), ("s2", 26380))
    assert settings.service == "cache" and settings.prefix == "app"
    assert settings.options == {"username": "u", "password": "p@ss", "db": 3,
                                "socket_keepalive": True}
    assert settings.sentinel_options == {"password": "sp", "username": "su"}


def test_tls_sentinel_shares_its_ca_with_the_sentinels() -> None:
    settings = parse_url("rediss+sentinel://s1/m?ssl_ca_certs=/ca.pem")
    assert settings.options["ssl"] is True and settings.options["ssl_ca_certs"] == "/ca.pem"
    assert settings.sentinel_options == {"ssl_ca_certs": "/ca.pem", "ssl": True}


def test_wait_options() -> None:
    settings = parse_url("redis+sentinel://s1/m?wait_replicas=2&wait_timeout=0.5")
    assert (settings.wait_replicas, settings.wait_timeout) == (2, 0.5)
    plain = parse_url("redis://h:6379/0?wait_replicas=1&prefix=p")
    assert plain.wait_replicas == 1 and plain.single_url == "redis://h:6379/0"


@pytest.mark.parametrize("url, words", [
    ("redis+sentinel://:topsecret@s1:26379", "names no primary"),
    ("redis+sentinel://:topsecret@/mymaster", "names no Sentinel"),
    ("redis+sentinel://:topsecret@s1:x/mymaster", "bad host:port"),
    ("redis+sentinel://:topsecret@s1/mymaster/zero", "database number"),
    ("redis+sentinel://:topsecret@s1/m?wait_replicas=-1", "wait_replicas"),
    ("redis+sentinel://:topsecret@s1/m?wait_timeout=0", "wait_timeout"),
    ("redis+cluster://:topsecret@h:7000?wait_replicas=1", "not supported on Redis Cluster"),
])
def test_bad_sentinel_urls_say_why_without_the_password(url: str, words: str) -> None:
    with pytest.raises(StorageURLError) as info:
        parse_url(url)
    assert words in str(info.value)
    assert "topsecret" not in str(info.value)


def test_redact_masks_both_passwords() -> None:
    url = "redis+sentinel://u:datapw@s1:26379,s2:26379/m/0?sentinel_password=sentpw&prefix=p"
    assert redact(url) == "redis+sentinel://u:***@s1:26379,s2:26379/m/0?sentinel_password=***&prefix=p"
