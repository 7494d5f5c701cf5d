"""``kafka://`` URLs: the brokers, conveyor's options and the client's own settings.

``kafka://user:secret@k1:9092,k2:9092?topic_prefix=conveyor&partitions=8`` — several
bootstrap hosts separated by commas; ``kafkas://`` for TLS. Every query parameter with a dot
in its name (``sasl.mechanism=SCRAM-SHA-512``, ``ssl.ca.location=/etc/ca.pem``) is a
librdkafka setting passed on as it is to both clients, or to one with ``consumer.`` or
``producer.`` before it (``consumer.fetch.wait.max.ms=100``); the names without a dot are
conveyor's (``OPTIONS``), and an unknown one is refused rather than ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

from conveyor.errors import BrokerURLError
from conveyor.storage import redact

__all__ = ["OPTIONS", "KafkaSettings", "parse_kafka_url"]

#: conveyor's own options and their defaults (docs/brokers.md, "Kafka").
OPTIONS = {
    "topic_prefix": "conveyor",  # the topic of queue q is "<topic_prefix>.<q>"
    "group": "",  # the workers' consumer group; default "<topic_prefix>-workers"
    "partitions": "8",  # partitions of a topic conveyor creates
    "replication": "-1",  # its replication factor (-1: the broker's default)
    "window": "10000",  # per partition: messages handed out past the commit point, at most
    "timeout": "10",  # seconds a publish waits for the broker's acknowledgement
    "session_timeout": "",  # seconds: the group's session timeout (librdkafka's default: 45)
}
# A bootstrap server: a name or IPv4 address, or an IPv6 address in brackets; then a port.
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[^\s\[\]:/@]+)(?::(?P<port>\d{1,5}))?")
_NUMBERS = ("partitions", "replication", "window", "timeout", "session_timeout")


@dataclass(frozen=True)
class KafkaSettings:
    """A parsed ``kafka://`` URL."""

    bootstrap: str
    prefix: str
    group: str
    partitions: int
    replication: int
    window: int
    timeout: float
    session_timeout: float | None
    client: dict[str, str] = field(default_factory=dict)  # librdkafka settings for both
    # clients: the security ones and every dotted query parameter
    consumer: dict[str, str] = field(default_factory=dict)  # for the consumer only
    producer: dict[str, str] = field(default_factory=dict)  # for the producer only

    def topic(self, queue: str) -> str:
        """The topic that carries conveyor queue ``queue``."""
        return f"{self.prefix}.{queue}"


def parse_kafka_url(url: str) -> KafkaSettings:
    """Parse ``url`` or raise ``BrokerURLError`` saying what is wrong (never the password)."""
    scheme, _, rest = url.partition("://")
    netloc, _, query = rest.partition("?")
    netloc = netloc.split("/", 1)[0]
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        userinfo, hosts = "", netloc
    if not hosts or any(not host.strip() for host in hosts.split(",")):
        raise BrokerURLError(f"broker URL {redact(url)!r} names no host")
    for host in hosts.split(","):
        server = _HOST.fullmatch(host.strip())
        if server is None or not 0 < int(server["port"] or 9092) < 65536:
            raise BrokerURLError(f"broker URL {redact(url)!r}: {host.strip()!r} is not a host "
                                 "or host:port (a port from 1 to 65535, an IPv6 address in [])")
    params = dict(parse_qsl(query, keep_blank_values=True))
    client = {k: v for k, v in params.items() if "." in k}
    sides: dict[str, dict[str, str]] = {"consumer": {}, "producer": {}}
    for name in list(client):
        side, _, setting = name.partition(".")
        if side in sides and "." in setting:
            sides[side][setting] = client.pop(name)
    unknown = sorted(k for k in params if "." not in k and k not in OPTIONS)
    if unknown:
        raise BrokerURLError(f"broker URL {redact(url)!r}: unknown option {unknown[0]!r} "
                             f"(conveyor's are {', '.join(OPTIONS)}; librdkafka's have a dot)")
    options = {k: params.get(k, v) for k, v in OPTIONS.items()}
    for name in _NUMBERS:
        try:
            if options[name] != "":
                float(options[name])
        except ValueError:
            raise BrokerURLError(f"broker URL {redact(url)!r}: {name}={options[name]!r} is "
                                 "not a number") from None
    secure = scheme.lower() == "kafkas"
    if userinfo:
        user, _, password = userinfo.partition(":")
        client.setdefault("sasl.username", unquote(user))
        client.setdefault("sasl.password", unquote(password))
        client.setdefault("sasl.mechanism", "PLAIN")
        client.setdefault("security.protocol", "SASL_SSL" if secure else "SASL_PLAINTEXT")
    elif secure:
        client.setdefault("security.protocol", "SSL")
    prefix = options["topic_prefix"] or "conveyor"
    return KafkaSettings(
        bootstrap=hosts, prefix=prefix, group=options["group"] or f"{prefix}-workers",
        partitions=max(1, int(float(options["partitions"]))),
        replication=int(float(options["replication"])),
        window=max(1, int(float(options["window"]))),
        timeout=max(0.1, float(options["timeout"])),
        session_timeout=float(options["session_timeout"]) if options["session_timeout"] else None,
        client=client, consumer=sides["consumer"], producer=sides["producer"])
