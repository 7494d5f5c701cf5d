"""A blob store in S3-compatible storage: ``s3://bucket/prefix?endpoint=https://host:9000&
region=us-east-1`` (AWS S3, MinIO, Ceph, Garage, moto's server…).

A small client of its own (the standard library's HTTP client and AWS Signature Version 4),
so the store needs no SDK: PUT, GET, DELETE (many keys per request) and ListObjectsV2. The
credentials are read from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (and
``AWS_SESSION_TOKEN``), never from the URL, so no URL shown anywhere holds a secret. Without
``endpoint`` the bucket's AWS endpoint is used (``https://s3.<region>.amazonaws.com``).
Path-style requests (``endpoint/bucket/key``), which every S3-compatible server accepts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import os
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl, quote, urlsplit

from conveyor.errors import BlobUnavailable, ConveyorError

__all__ = ["S3Blobs"]

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_TIMEOUT = 30.0


class S3Blobs:
    """A ``BlobStore`` over one bucket and key prefix."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme.lower() != "s3" or not parts.netloc:
            raise ConveyorError(f"blob store {url!r}: expected s3://bucket/prefix")
        query = dict(parse_qsl(parts.query))
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/") + "/" if parts.path.strip("/") else ""
        self.region = query.get("region") or os.environ.get("AWS_REGION") or "us-east-1"
        endpoint = query.get("endpoint") or f"https://s3.{self.region}.amazonaws.com"
        target = urlsplit(endpoint)
        if target.scheme not in ("http", "https") or not target.hostname:
            raise ConveyorError(f"blob store {url!r}: endpoint must be http(s)://host[:port]")
        self._https = target.scheme == "https"
        self._host = target.netloc
        self.where = f"s3://{self.bucket}/{self.prefix} at {target.scheme}://{target.netloc}"
        self._local = threading.local()

    # -- the BlobStore protocol ---------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        """PUT the object (S3 acknowledges a PUT once the object is durable)."""
        self._call("PUT", self._path(key), body=data, ok=(200,))

    def get(self, key: str) -> bytes | None:
        """GET the object; None on 404."""
        status, body = self._call("GET", self._path(key), ok=(200, 404))
        return None if status == 404 else body

    def delete(self, keys: Sequence[str]) -> None:
        """DeleteObjects, 1,000 keys per request."""
        for start in range(0, len(keys), 1000):
            items = "".join(f"<Object><Key>{_xml(self.prefix + k)}</Key></Object>"
                            for k in keys[start:start + 1000])
            body = f"<Delete><Quiet>true</Quiet>{items}</Delete>".encode()
            md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
            self._call("POST", f"/{self.bucket}", query={"delete": ""}, body=body,
                       headers={"content-md5": md5}, ok=(200,))

    def listing(self, before: float) -> Iterator[str]:
        """ListObjectsV2 under the prefix, keys last modified before ``before``."""
        token: str | None = None
        while True:
            query = {"list-type": "2", "prefix": self.prefix}
            if token:
                query["continuation-token"] = token
            _, body = self._call("GET", f"/{self.bucket}", query=query, ok=(200,))
            root = ET.fromstring(body)
            for item in root.iter(f"{_NS}Contents"):
                key = item.findtext(f"{_NS}Key") or ""
                stamp = _when(item.findtext(f"{_NS}LastModified") or "")
                if key.startswith(self.prefix) and stamp < before:
                    yield key[len(self.prefix):]
            token = root.findtext(f"{_NS}NextContinuationToken")
            if root.findtext(f"{_NS}IsTruncated") != "true" or not token:
                return

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- requests -----------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        return f"/{self.bucket}/{quote(self.prefix + key, safe='/-_.~')}"

    def _conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = kind(self._host, timeout=_TIMEOUT)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _call(self, method: str, path: str, *, query: dict[str, str] | None = None,
              body: bytes = b"", headers: dict[str, str] | None = None,
              ok: tuple[int, ...]) -> tuple[int, bytes]:
        canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
                                   for k, v in sorted((query or {}).items()))
        signed = self._sign(method, path, canonical_query, body, headers or {})
        target = path + (f"?{canonical_query}" if canonical_query else "")
        for attempt in (1, 2):  # a kept connection the server closed meanwhile: once more
            conn = self._conn()
            try:
                conn.request(method, target, body=body, headers=signed)
                response = conn.getresponse()
                data = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise BlobUnavailable(f"blob store {self.where}: {exc}") from exc
        if response.status not in ok:
            code = _error_code(data)
            raise BlobUnavailable(f"blob store {self.where}: {method} answered "
                                  f"{response.status} {code}".rstrip())
        return response.status, data

    def _sign(self, method: str, path: str, query: str, body: bytes,
              extra: dict[str, str]) -> dict[str, str]:
        """The request's headers with an AWS Signature Version 4 ``Authorization``."""
        access = os.environ.get("AWS_ACCESS_KEY_ID", "")
        secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        if not access or not secret:
            raise BlobUnavailable(f"blob store {self.where}: set AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY")
        now = datetime.now(timezone.utc)
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        digest = hashlib.sha256(body).hexdigest()
        headers = {"host": self._host, "x-amz-date": stamp, "x-amz-content-sha256": digest,
                   **{k.lower(): v for k, v in extra.items()}}
        session = os.environ.get("AWS_SESSION_TOKEN")
        if session:
            headers["x-amz-security-token"] = session
        names = sorted(headers)
        canonical = "\n".join([method, path, query,
                               "".join(f"{n}:{headers[n].strip()}\n" for n in names),
                               ";".join(names), digest])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        key = f"AWS4{secret}".encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
                                    f"SignedHeaders={';'.join(names)}, Signature={signature}")
        return headers


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _when(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        try:
            return parsedate_to_datetime(text).timestamp()
        except (TypeError, ValueError):
            return float("inf")  # a time it cannot read: never old enough to collect


def _error_code(body: bytes) -> str:
    try:
        return ET.fromstring(body).findtext("Code") or ""
    except ET.ParseError:
        return ""
