"""What every conveyor HTTP endpoint checks before its app sees a request: ASGI middleware.

``guard(app, hosts)`` wraps the dashboard and the metrics app alike:

- **Host check** (DNS rebinding): a page on ``evil.example`` whose name an attacker re-points
  at 127.0.0.1 reaches a local server, but its requests still say ``Host: evil.example``. Only
  the loopback names, IP literals (a rebinding attack needs a name the attacker controls, so an
  address in ``Host`` cannot be one), the bound name and the configured names are served;
  anything else gets 421 and one line.
- **Body limit**: a ``Content-Length`` over ``MAX_BODY`` is refused with 413 before a byte of
  the body is read; a chunked body is counted as it arrives and refused at the limit.
- **Body deadline**: the whole body must arrive within ``BODY_TIMEOUT`` seconds, else 408
  (once it is in, ``receive`` waits as long as the app likes: for ``http.disconnect``).
  Whenever a body was not read to its end the response says ``Connection: close``, so the
  server drops the connection instead of waiting for (and discarding) the rest.

Header size, idle keep-alive, head-reading time and connection count are limited by the
server (``conveyor.http.server``); a request that passes all of these costs at most ``MAX_BODY``.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import ipaddress
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 1024 * 1024
BODY_TIMEOUT = 10.0
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ANY_HOST = "*"


class BodyTooLarge(Exception):
    """A request body over ``MAX_BODY``."""


class BodyTimeout(Exception):
    """A request body that did not arrive within ``BODY_TIMEOUT``."""


def host_name(header: str) -> str:
    """The name part of a ``Host`` header: no port, no IPv6 brackets, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name, sep, port = header.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else header


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def allowed_hosts(names: Iterable[str] = ()) -> frozenset[str]:
    """The loopback names plus ``names`` (host names, ``host:port``, ``.example.com`` for a
    domain and its subdomains as in Django's ``ALLOWED_HOSTS``, or ``*`` for any host)."""
    return LOOPBACK_NAMES | {n if n == ANY_HOST else host_name(n) for n in names if n}


def host_allowed(header: str, hosts: frozenset[str]) -> bool:
    """Whether a request naming ``header`` in ``Host`` may be served."""
    if ANY_HOST in hosts:
        return True
    name = host_name(header).rstrip(".")
    return bool(name) and (name in hosts or _is_ip(name) or any(
        h.startswith(".") and (name == h[1:] or name.endswith(h)) for h in hosts))


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case) as text, or None."""
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def bearer_or_basic(authorization: str, token: str) -> str | None:
    """``"bearer"`` or ``"basic"`` when the ``Authorization`` header carries ``token``.

    Basic auth takes the token as the password, with any user name (Prometheus's
    ``basic_auth`` and browsers both send it this way). Compared in constant time.
    """
    secret = token.encode()
    if authorization.startswith("Bearer "):
        if hmac.compare_digest(authorization[7:].strip().encode("latin-1"), secret):
            return "bearer"
    elif authorization.startswith("Basic "):
        try:
            decoded = base64.b64decode(authorization[6:], validate=True)
        except ValueError:
            return None
        if hmac.compare_digest(decoded.partition(b":")[2], secret):
            return "basic"
    return None


async def plain(send: Send, status: int, text: str, *, close: bool = False,
                extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Send a one-line ``text/plain`` response."""
    body = (text.rstrip("\n") + "\n").encode("utf-8", "backslashreplace")
    headers = [(b"content-type", b"text/plain; charset=utf-8"),
               (b"content-length", str(len(body)).encode()),
               (b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store"),
               *extra]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _declared_length(scope: Scope) -> int | None:
    """The ``Content-Length`` (0 without one, None when it is not a number)."""
    value = header(scope, b"content-length")
    if value is None:
        return 0
    value = value.strip()
    return int(value) if value.isdigit() else None


def guard(app: ASGIApp, hosts: frozenset[str], *, max_body: int = MAX_BODY,
          body_timeout: float = BODY_TIMEOUT) -> ASGIApp:
    """``app`` behind the Host check, the body limit and the body deadline (see module doc)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        host = header(scope, b"host") or ""
        if not host_allowed(host, hosts):
            await plain(send, 421, f"this server does not answer to the host {host[:100]!r}; "
                        "add it with --allow-host (conveyor web/metrics) or allowed_hosts=")
            return
        declared = _declared_length(scope)
        chunked = "chunked" in (header(scope, b"transfer-encoding") or "").lower()
        if declared is None or declared > max_body:
            await plain(send, 413, f"request body too large (the limit is {max_body} bytes)",
                        close=True)
            return
        state = {"done": not declared and not chunked}
        deadline = time.monotonic() + body_timeout

        async def bounded_receive() -> Message:
            if state["done"]:  # the body is in: what is left to hear is a disconnect
                return await receive()
            try:
                message = await asyncio.wait_for(
                    receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise BodyTimeout() from None
            if message["type"] != "http.request" or not message.get("more_body"):
                state["done"] = True
            return message

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not state["done"]:
                message = {**message, "headers": [*message.get("headers", ()),
                                                  (b"connection", b"close")]}
            await send(message)

        try:
            await app(scope, bounded_receive, closing_send)
        except BodyTimeout:
            await plain(send, 408, f"request body not received within {body_timeout:g} s",
                        close=True)
        except BodyTooLarge:
            await plain(send, 413, f"request body too large (the limit is {max_body} bytes)",
                        close=True)

    return guarded


def mount_at(prefix: str, app: ASGIApp, host: ASGIApp) -> ASGIApp:
    """An ASGI app that serves ``app`` (the dashboard) under ``prefix`` and everything else
    with ``host``: for an ASGI host with no router of its own (Django's
    ``get_asgi_application()``). ``app`` sees ``root_path`` extended by the prefix, as a
    Starlette ``Mount`` sets it."""
    prefix = "/" + prefix.strip("/")

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        root = str(scope.get("root_path") or "").rstrip("/")
        path = str(scope.get("path") or "")
        under = root + prefix
        if scope["type"] == "http" and (path in (under, prefix) or path.startswith(
                (under + "/", prefix + "/"))):
            full = path if path.startswith(under) else root + path
            await app({**scope, "root_path": under, "path": full}, receive, send)
        else:
            await host(scope, receive, send)

    return dispatch

