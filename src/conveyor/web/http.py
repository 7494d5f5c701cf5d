"""Just enough HTTP for the dashboard: a parsed request and a response that speaks ASGI."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, quote

from conveyor.storage.base import Inspector

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY = 1024 * 1024

# The dashboard never needs inline scripts or third-party content; forbidding them means an
# escaping mistake cannot turn into script execution.
SECURITY_HEADERS = (
    ("content-security-policy",
     "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
)


class BodyTooLarge(Exception):
    """A request body over ``MAX_BODY``."""


@dataclass
class Request:
    """A parsed HTTP request."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    cookies: dict[str, str]
    form: dict[str, list[str]] = field(default_factory=dict)
    root: str = ""  # the prefix the app is mounted under (ASGI root_path), e.g. "/ops"

    def arg(self, name: str, default: str = "") -> str:
        """First query value of ``name``."""
        return self.query.get(name, [default])[0]

    def field(self, name: str, default: str = "") -> str:
        """First form value of ``name``."""
        return self.form.get(name, [default])[0]

    def int_arg(self, name: str, default: int, low: int = 0, high: int = 10_000) -> int:
        """An integer query value clamped to [low, high]; bad input gives the default."""
        try:
            return max(low, min(high, int(self.arg(name, str(default)))))
        except ValueError:
            return default

    @classmethod
    async def read(cls, scope: Scope, receive: Receive) -> Request:
        """Parse the scope and, for forms, the body."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header from another app on the host
            cookie = SimpleCookie()
        root = str(scope.get("root_path") or "").rstrip("/")
        path = scope["path"]
        if root and (path == root or path.startswith(root + "/")):
            path = path[len(root):] or "/"  # ASGI paths include root_path; routes do not
        request = cls(
            method=scope["method"].upper(), path=path, root=root,
            query=parse_qs(scope.get("query_string", b"").decode("latin-1")),
            headers=headers, cookies={k: m.value for k, m in cookie.items()},
        )
        if request.method == "POST":
            body = await _read_body(receive)
            if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
                request.form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        return request


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise BodyTooLarge()
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


@dataclass
class Response:
    """A complete response, sent in one ASGI body message."""

    body: bytes | str = b""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    async def send(self, send: Send) -> None:
        """Send status, headers and body over ASGI."""
        body = self.body.encode() if isinstance(self.body, str) else self.body
        raw = [(b"content-type", self.content_type.encode()),
               (b"content-length", str(len(body)).encode())]
        raw += [(k.encode(), v.encode()) for k, v in (*SECURITY_HEADERS, *self.headers)]
        await send({"type": "http.response.start", "status": self.status, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    def set_cookie(self, name: str, value: str, *, http_only: bool = True) -> None:
        """A same-site strict, path-wide session cookie."""
        flags = "; HttpOnly" if http_only else ""
        cookie = f"{name}={quote(value)}; Path=/; SameSite=Strict{flags}"
        self.headers.append(("set-cookie", cookie))


def json_response(data: Any, status: int = 200) -> Response:
    """A JSON response."""
    return Response(json.dumps(data, default=str), status, "application/json")


_LOCAL_LINK = re.compile(rb'((?:href|src|action|data-api)=")/(?!/)')


def mount(response: Response, root: str) -> Response:
    """Prefix the local links, form targets and redirects of a response with ``root``.

    Pages are written with absolute paths (``/jobs``); mounted under ``/ops`` they must say
    ``/ops/jobs``. A no-op when the app is served at the root.
    """
    if not root:
        return response
    if response.content_type.startswith("text/html"):
        body = response.body.encode() if isinstance(response.body, str) else response.body
        response.body = _LOCAL_LINK.sub(rb"\1" + root.encode() + b"/", body)
    response.headers = [(k, root + v if k == "location" and v.startswith("/") else v)
                        for k, v in response.headers]
    return response


def redirect(location: str) -> Response:
    """A 303 See Other, so a POST result is re-fetched with GET."""
    return Response(b"", 303, headers=[("location", location)])


def safe_next(target: str, default: str = "/") -> str:
    """A local path to return to after a POST; anything else (``//evil``, ``http:``) → default."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return default


T = TypeVar("T")


class StorageCaller(Protocol):
    """What a page needs from the dashboard: run a blocking storage call off the event loop."""

    async def call(self, func: Callable[[Inspector], T]) -> T:
        """Run ``func(inspector)`` on the storage thread."""
        ...
