"""Just enough HTTP for the dashboard: a parsed request and a response that speaks ASGI."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, quote

from conveyor.client.payloads import JobData
from conveyor.http.asgi import MAX_BODY, BodyTooLarge, Receive, Scope, Send
from conveyor.storage.base import Inspector

__all__ = ["MAX_BODY", "BodyTooLarge", "Receive", "Request", "Response", "Scope", "Send"]

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


class BadRequest(Exception):
    """A request conveyor cannot read (a malformed form, query or header): 400, one line."""


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
    secure: bool = False  # served over https (TLS, or a trusted proxy's X-Forwarded-Proto)
    flash: str = ""  # the message of the last action, from the server's signed cookie
    store: str = ""  # the store the dashboard reads, as every page's header names it
    client: str = ""  # the peer's address (ASGI ``client``): who made a change, in audit trails
    #: Set when the client disconnects (``lanes.watch``): a long read stops at its next step.
    gone: threading.Event = field(default_factory=threading.Event)

    @property
    def cross_site(self) -> bool:
        """Sent by a page of another site (``Sec-Fetch-Site``, which browsers set and pages
        cannot): an ``<img>`` or a link elsewhere, never the dashboard's own forms."""
        return self.headers.get("sec-fetch-site", "") in ("cross-site", "same-site")

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

    async def read_form(self, receive: Receive) -> None:
        """Read a POST's body (at most ``MAX_BODY``) into ``form`` when it is url-encoded."""
        if self.method != "POST":
            return
        body = await _read_body(receive)
        if self.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            self.form = _parse_qs(body, blanks=True)

    @classmethod
    async def read(cls, scope: Scope) -> Request:
        """Parse the scope: method, path, query, headers and cookies (not the body)."""
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
            query=_parse_qs(bytes(scope.get("query_string", b"")), blanks=False),
            headers=headers, cookies={k: m.value for k, m in cookie.items()},
            secure=scope.get("scheme") == "https",
            client=str((scope.get("client") or ("",))[0] or ""),
        )
        return request


def _parse_qs(raw: bytes, *, blanks: bool) -> dict[str, list[str]]:
    """A query string or url-encoded form; anything but plain UTF-8 text is a ``BadRequest``.

    Values are refused when they decode to control characters (the dashboard has no
    multi-line field): no value that reaches a page, a header or the storage can carry a raw
    CR/LF pair into a header or a tab into a link a browser would then read differently.
    """
    try:
        text = raw.decode("ascii")
        parsed = parse_qs(text, keep_blank_values=blanks, errors="strict", max_num_fields=10_000)
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("malformed query string or form: expected url-encoded UTF-8") from None
    for values in parsed.values():
        for value in values:
            if _CONTROL.search(value):
                raise BadRequest("a form or query value holds a control character")
    return parsed


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":  # a half-sent form is never acted on
            raise BadRequest("the client went away before sending the whole body")
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
    #: The ``location`` is the host application's (its sign-in page), not under the prefix.
    outside: bool = False
    #: A body sent as it is produced (an export), in place of ``body``: never whole in memory.
    chunks: AsyncIterator[bytes] | None = None

    async def send(self, send: Send) -> None:
        """Send status, headers and body over ASGI."""
        # backslashreplace: text from a damaged job (a lone surrogate) must still be sendable
        body = (self.body.encode("utf-8", "backslashreplace") if isinstance(self.body, str)
                else self.body)
        raw = [(b"content-type", self.content_type.encode())]
        if self.chunks is None:
            raw.append((b"content-length", str(len(body)).encode()))
        raw += [(k.encode(), v.encode("utf-8", "backslashreplace"))
                for k, v in (*SECURITY_HEADERS, *self.headers)]
        await send({"type": "http.response.start", "status": self.status, "headers": raw})
        if self.chunks is not None:
            async for chunk in self.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"" if self.chunks else body})

    def set_cookie(self, name: str, value: str, *, secure: bool, max_age: int | None = None
                   ) -> None:
        """A same-site strict, path-wide, HttpOnly cookie; ``Secure`` when served over https."""
        flags = "; Secure" if secure else ""
        if max_age is not None:
            flags += f"; Max-Age={max_age}"
        cookie = f"{name}={quote(value)}; Path=/; SameSite=Strict; HttpOnly{flags}"
        self.headers.append(("set-cookie", cookie))


def json_response(data: Any, status: int = 200) -> Response:
    """A JSON response."""
    return Response(json.dumps(data, default=str), status, "application/json")


_LOCAL_LINK = re.compile(rb'((?:href|src|action|data-api)=")/(?!/)')


def mount(response: Response, root: str) -> Response:
    """Prefix the local links, form targets, redirects and cookie paths of a response with
    ``root`` (the cookies of a dashboard under ``/ops`` are sent to ``/ops`` only).

    Pages are written with absolute paths (``/jobs``); mounted under ``/ops`` they must say
    ``/ops/jobs``. A no-op when the app is served at the root.
    """
    if not root:
        return response
    if response.content_type.startswith("text/html"):
        body = response.body.encode() if isinstance(response.body, str) else response.body
        response.body = _LOCAL_LINK.sub(rb"\1" + root.encode() + b"/", body)
    moved = not response.outside
    response.headers = [(k, root + v if k == "location" and moved and v.startswith("/") else
                         v.replace("; Path=/;", f"; Path={root};") if k == "set-cookie" else v)
                        for k, v in response.headers]
    return response


def redirect(location: str) -> Response:
    """A 303 See Other, so a POST result is re-fetched with GET."""
    return Response(b"", 303, headers=[("location", location)])


# One slash, then only the characters of a URL path and query (RFC 3986 pchar, "/" and "?"):
# no scheme, no "//host", no backslash (browsers read "/\\evil" as "//evil"), no whitespace or
# control character (browsers drop tabs and newlines, so "/\t/evil" would become "//evil").
_LOCAL_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9\-._~!$&'()*+,;=:@%/?]*")


def safe_next(target: str, default: str = "/") -> str:
    """``target`` if it is a plain local path, else ``default`` (``//evil``, ``http:``, …)."""
    return target if _LOCAL_PATH.fullmatch(target) else default


T = TypeVar("T")


class StorageCaller(Protocol):
    """What a page needs from the dashboard: run blocking storage calls off the event loop
    (``web/lanes.py``)."""

    @property
    def data(self) -> JobData | None:
        """The keys (and blob store) pages open job data with: the app's, when the
        dashboard was given one; None shows sealed data as ``encrypted``."""
        ...

    @property
    def brokered(self) -> bool:
        """Whether a broker delivers the jobs (the app's ``broker``), for explanations."""
        ...

    async def call(self, func: Callable[[Inspector], T]) -> T:
        """Run ``func(inspector)`` on a page thread."""
        ...

    async def call_long(self, func: Callable[[Inspector], T]) -> T:
        """Run ``func(inspector)``, a long read (a search), on a long-read thread."""
        ...

    def stream(self, make: Callable[[Inspector], Iterator[str]],
               gone: threading.Event) -> AsyncIterator[bytes]:
        """The text ``make(inspector)`` yields, produced chunk by chunk as it is sent."""
        ...
