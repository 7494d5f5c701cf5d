"""Redis storage URLs: what each form means, parsed into ``Settings``.

* ``redis://[user:pass@]host:port/db``, ``rediss://`` (TLS), ``valkey://``, ``valkeys://``;
* ``redis+cluster://host1:7000,host2:7001`` (``rediss+cluster://`` with TLS);
* ``redis+sentinel://[user:pass@]s1:26379,s2:26379,s3:26379/mymaster[/db]``
  (``rediss+sentinel://`` with TLS to the data nodes and the Sentinels): the hosts are the
  Sentinels (port 26379 when left out), the path names the primary as the Sentinels know it
  and then the database. The userinfo logs in to the data nodes; ``sentinel_password=`` and
  ``sentinel_username=`` log in to the Sentinels. This is the form of the Redis-Sentinel-Url
  package and of Prefect's and docket's URLs (redis-py itself has no Sentinel URL; kombu
  takes ``sentinel://h1;sentinel://h2`` plus a ``master_name`` transport option, RQ a
  settings dict), so one URL can serve conveyor and those tools.

Every form takes ``prefix=NAME`` (default ``conveyor``) and redis-py connection options such
as ``ssl_ca_certs``; a single server and a Sentinel-managed primary also take
``wait_replicas=N`` (enqueue and ack return only once N replicas hold the write, Redis
``WAIT``) and ``wait_timeout=SECONDS`` (default 1: how long one ``WAIT`` may take before the
write is tried again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from redis.connection import parse_url as redis_parse_url

from conveyor.errors import StorageURLError
from conveyor.storage import redact

DEFAULT_PREFIX = "conveyor"
SENTINEL_PORT = 26379
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SINGLE_SCHEMES = ("redis", "rediss", "valkey", "valkeys")
# Query options for the Sentinels themselves (the rest are for the data nodes).
SENTINEL_OPTIONS = {"sentinel_password": "password", "sentinel_username": "username"}


@dataclass(frozen=True, slots=True)
class Settings:
    """What a storage URL says: where Redis is, how to log in, and the key prefix.

    ``hosts`` are the Cluster's seed nodes, or the Sentinels (then ``service`` is the name of
    the primary they watch); ``wait_replicas`` > 0 makes enqueue and ack wait for replicas.
    """

    url: str
    cluster: bool
    prefix: str
    hosts: tuple[tuple[str, int], ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    single_url: str = ""
    sentinel: bool = False
    service: str = ""
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    wait_replicas: int = 0
    wait_timeout: float = 1.0


def parse_url(url: str) -> Settings:
    """Split a storage URL into client settings; raises ``StorageURLError`` when malformed."""
    scheme = url.partition("://")[0].lower()
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    prefix = query.pop("prefix", DEFAULT_PREFIX) or DEFAULT_PREFIX
    wait = _wait_options(url, query)
    if scheme in CLUSTER_SCHEMES:
        if wait["wait_replicas"]:
            raise StorageURLError(f"wait_replicas in {redact(url)!r}: not supported on Redis "
                                  "Cluster (use a single server or Sentinel)")
        return _cluster_settings(url, scheme, parts.netloc, query, prefix)
    if scheme in SENTINEL_SCHEMES:
        return _sentinel_settings(url, scheme, parts.netloc, parts.path, query, prefix, wait)
    if scheme not in SINGLE_SCHEMES:
        raise StorageURLError(f"not a Redis URL: {redact(url)!r}")
    real_scheme = "rediss" if scheme in ("rediss", "valkeys") else "redis"
    clean = urlunsplit((real_scheme, parts.netloc, parts.path, urlencode(query), ""))
    if not parts.hostname:
        raise StorageURLError(f"Redis URL {redact(url)!r} names no host")
    try:
        port = 6379 if parts.port is None else parts.port
    except ValueError:  # urllib's "Port could not be cast to integer value as 'x'"
        port = 0
    if not 0 < port < 65536:
        raise StorageURLError(f"Redis URL {redact(url)!r} has a port that is not a number "
                              "from 1 to 65535")
    _check_database(url, parts.path.lstrip("/"))
    return Settings(url=url, cluster=False, prefix=prefix, single_url=clean,
                    hosts=((parts.hostname, port),), **wait)


def _wait_options(url: str, query: dict[str, str]) -> dict[str, Any]:
    replicas, timeout = query.pop("wait_replicas", "0"), query.pop("wait_timeout", "1")
    if not replicas.isdigit():
        raise StorageURLError(f"wait_replicas={replicas!r} in {redact(url)!r}: expected a "
                              "number of replicas (0 turns waiting off)")
    try:
        seconds = float(timeout)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 60:
        raise StorageURLError(f"wait_timeout={timeout!r} in {redact(url)!r}: expected seconds "
                              "above 0, at most 60")
    return {"wait_replicas": int(replicas), "wait_timeout": seconds}


def _check_database(url: str, database: str) -> None:
    if database and not database.isdigit():
        raise StorageURLError(f"Redis URL {redact(url)!r} names database {database!r}; the "
                              "path must be a database number, e.g. redis://host:6379/0")


def _hosts(url: str, hostlist: str, default_port: int | None) -> list[tuple[str, int]]:
    hosts = []
    for item in filter(None, hostlist.split(",")):
        host, colon, port = item.rpartition(":")
        if not colon and default_port is not None:
            host, port = item, str(default_port)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise StorageURLError(f"bad host:port {item!r} in {redact(url)!r}")
        hosts.append((host, int(port)))
    return hosts


def _cluster_settings(
    url: str, scheme: str, netloc: str, query: dict[str, str], prefix: str
) -> Settings:
    creds, _, hostlist = netloc.rpartition("@")
    user, colon, password = creds.partition(":")
    hosts = _hosts(url, hostlist, None)
    if not hosts:
        raise StorageURLError(f"Redis Cluster URL {redact(url)!r} names no host")
    options: dict[str, Any] = dict(query)
    if user:
        options["username"] = user
    if colon:
        options["password"] = password
    if scheme == "rediss+cluster":
        options["ssl"] = True
    return Settings(url=url, cluster=True, prefix=prefix, hosts=tuple(hosts), options=options)


def _sentinel_settings(url: str, scheme: str, netloc: str, path: str, query: dict[str, str],
                       prefix: str, wait: dict[str, Any]) -> Settings:
    creds, at, hostlist = netloc.rpartition("@")
    hosts = _hosts(url, hostlist, SENTINEL_PORT)
    if not hosts:
        raise StorageURLError(f"Redis Sentinel URL {redact(url)!r} names no Sentinel")
    service, _, database = path.strip("/").partition("/")
    if not service:
        raise StorageURLError(f"Redis Sentinel URL {redact(url)!r} names no primary: put the "
                              "name the Sentinels monitor after the hosts, e.g. "
                              "redis+sentinel://s1:26379,s2:26379/mymaster/0")
    _check_database(url, database)
    sentinel_options: dict[str, Any] = {}
    for name, option in SENTINEL_OPTIONS.items():
        if name in query:
            sentinel_options[option] = query.pop(name)
    # redis-py's own URL parser gives each option its type (socket_timeout=2 -> 2.0, ...);
    # the host is a stand-in, dropped again.
    real = "rediss" if scheme == "rediss+sentinel" else "redis"
    parsed: dict[str, Any] = redis_parse_url(urlunsplit(  # type: ignore[no-untyped-call]
        (real, f"{creds}{at}sentinel", f"/{database or 0}", urlencode(query), "")))
    for name in ("host", "port"):
        parsed.pop(name, None)
    if parsed.pop("connection_class", None) is not None:
        parsed["ssl"] = True
        # One CA (and client certificate) serves the data nodes and the Sentinels.
        sentinel_options.update({k: v for k, v in parsed.items() if k.startswith("ssl_")})
        sentinel_options["ssl"] = True
    return Settings(url=url, cluster=False, prefix=prefix, hosts=tuple(hosts), options=parsed,
                    sentinel=True, service=unquote(service),
                    sentinel_options=sentinel_options, **wait)
