"""Storage URLs of the Redis engine: schemes, credentials, prefix, cluster host lists."""

from __future__ import annotations

import pytest

from conveyor.errors import StorageURLError
from conveyor.storage.redis.connection import parse_url


def test_plain_url_with_prefix() -> None:
    settings = parse_url("redis://127.0.0.1:6380/2?prefix=app1")
    assert not settings.cluster and settings.prefix == "app1"
    assert settings.single_url == "redis://127.0.0.1:6380/2"


def test_default_prefix_and_valkey_scheme() -> None:
    settings = parse_url("valkey://cache.internal:6379/0")
    assert settings.prefix == "conveyor"
    assert settings.single_url == "redis://cache.internal:6379/0"
    assert parse_url("rediss://h:6379/0").single_url.startswith("rediss://")


def test_tls_options_pass_through() -> None:
    settings = parse_url("rediss://:pw@h:6379/0?prefix=p&ssl_ca_certs=/ca.pem")
    assert settings.single_url == "rediss://:pw@h:6379/0?ssl_ca_certs=%2Fca.pem"
    assert settings.prefix == "p"


def test_cluster_url_with_credentials() -> None:
    settings = parse_url("rediss+cluster://user:s3cret@10.0.0.1:7000,10.0.0.2:7001?prefix=c")
    assert settings.cluster and settings.prefix == "c"
    assert settings.hosts == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert settings.options == {"username": "user", "password": "s3cret", "ssl": True}


@pytest.mark.parametrize("url", ["redis+cluster://", "redis+cluster://host", "redis:///0"])
def test_bad_urls_are_rejected_without_the_password(url: str) -> None:
    with pytest.raises(StorageURLError):
        parse_url(url)


def test_bad_cluster_url_hides_the_password() -> None:
    with pytest.raises(StorageURLError) as info:
        parse_url("redis+cluster://u:topsecret@host:port")
    assert "topsecret" not in str(info.value)
