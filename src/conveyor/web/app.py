"""The dashboard as an ASGI app: authentication, CSRF, routing and the storage thread.

Security model (docs/operations.md): bind to 127.0.0.1 by default; with a token, a request
is let in by ``Authorization: Bearer T``, HTTP basic auth with password ``T``, or the session
cookie set after visiting any page with ``?token=T``. Every state change is a POST carrying the
CSRF token from the ``conveyor_csrf`` cookie (double submit, SameSite=Strict); GET never changes
state. Everything shown from job data is HTML-escaped, and a strict CSP forbids inline script.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import urlencode

from conveyor.errors import ConveyorError, StorageUnavailable
from conveyor.storage.base import Inspector
from conveyor.web import actions, pages
from conveyor.web.http import (
    BodyTooLarge,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    json_response,
    mount,
    redirect,
    safe_next,
)

SESSION_COOKIE = "conveyor_session"
CSRF_COOKIE = "conveyor_csrf"
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".svg": "image/svg+xml"}
T = TypeVar("T")


class Dashboard:
    """The ASGI application returned by ``create_app``."""

    def __init__(self, source: Any, token: str | None = None) -> None:
        self._source = source
        self._token = token or None
        # SQLite connections are bound to threads: all storage calls go through one thread.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conveyor-web-db")

    @property
    def inspector(self) -> Inspector:
        """The storage: the object itself, or an app's (lazily opened) ``storage``."""
        if hasattr(self._source, "list_jobs"):
            return self._source  # type: ignore[no-any-return]
        return self._source.storage  # type: ignore[no-any-return]

    async def call(self, func: Callable[[Inspector], T]) -> T:
        """Run a blocking storage call on the storage thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: func(self.inspector))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point (``http`` and ``lifespan``)."""
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            request = await Request.read(scope, receive)
            response = mount(await self.handle(request), request.root)
        except BodyTooLarge:
            response = Response("request body too large", 413, "text/plain")
        await response.send(send)

    async def handle(self, request: Request) -> Response:
        """Authenticate, check CSRF for POSTs, route, and give every page a CSRF cookie."""
        if request.path.startswith("/static/"):
            return _static(request.path[len("/static/"):])
        if request.method not in ("GET", "HEAD", "POST"):
            return Response("method not allowed", 405, "text/plain", [("allow", "GET, POST")])
        how = self._authenticate(request)
        if how is None:
            return self._login(request)
        if how == "query":  # drop the token from the address bar and history
            query = {k: v for k, v in request.query.items() if k != "token"}
            suffix = "?" + urlencode(query, doseq=True) if query else ""
            response = redirect(request.path + suffix)
            response.set_cookie(SESSION_COOKIE, self._session_value())
            return response
        csrf = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)
        try:
            if request.method == "POST":
                response = await self._post(request, csrf, bearer=(how == "bearer"))
            else:
                response = await pages.route(self, request, csrf)
        except ConveyorError as exc:
            status = _status_of(exc)
            if request.path.startswith("/api/"):
                response = json_response({"error": str(exc)}, status)
            else:
                response = pages.error_page(str(exc), status, csrf)
        if CSRF_COOKIE not in request.cookies:
            response.set_cookie(CSRF_COOKIE, csrf)
        return response

    async def _post(self, request: Request, csrf: str, bearer: bool) -> Response:
        origin = request.headers.get("origin")
        host = request.headers.get("host", "")
        if origin and origin.split("://", 1)[-1] != host:
            return Response("cross-origin POST refused", 403, "text/plain")
        if not bearer:
            sent = request.field("csrf")
            if not (sent and request.cookies.get(CSRF_COOKIE)
                    and hmac.compare_digest(sent, request.cookies[CSRF_COOKIE])):
                return Response("missing or wrong CSRF token; reload the page and try again",
                                403, "text/plain")
        result = await self.call(lambda insp: actions.perform(insp, request.path, request.form))
        if request.headers.get("accept", "").startswith("application/json"):
            return json_response({"ok": True, "message": result})
        target = safe_next(request.field("next"), "/")
        sep = "&" if "?" in target else "?"
        return redirect(f"{target}{sep}{urlencode({'flash': result})}")

    def _session_value(self) -> str:
        assert self._token is not None
        return hmac.new(self._token.encode(), b"conveyor-session", hashlib.sha256).hexdigest()

    def _authenticate(self, request: Request) -> str | None:
        """How the request proved itself: open, bearer, basic, cookie, query; None if not."""
        if self._token is None:
            return "open"
        token = self._token.encode()
        auth = request.headers.get("authorization", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip().encode(), token):
            return "bearer"
        if auth.startswith("Basic "):
            try:
                _, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                password = ""
            if hmac.compare_digest(password.encode(), token):
                return "basic"
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if cookie and hmac.compare_digest(cookie, self._session_value()):
            return "cookie"
        if request.method == "GET" and hmac.compare_digest(request.arg("token").encode(), token):
            return "query"
        return None

    def _login(self, request: Request) -> Response:
        if request.path.startswith(("/api/", "/metrics")) or request.method == "POST":
            return Response("authentication required\n", 401, "text/plain",
                            [("www-authenticate", 'Bearer realm="conveyor"')])
        return pages.login_page(request.path)


def _status_of(exc: ConveyorError) -> int:
    """404 for an unknown job or batch, 503 when the storage is down, else 400."""
    if isinstance(exc, LookupError):
        return 404
    return 503 if isinstance(exc, StorageUnavailable) else 400


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _static(name: str) -> Response:
    """A file from ``conveyor/web/static`` (no sub-directories, so no path tricks)."""
    suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
    if "/" in name or "\\" in name or name.startswith(".") or suffix not in STATIC_TYPES:
        return Response("not found", 404, "text/plain")
    try:
        data = resources.files("conveyor.web").joinpath("static").joinpath(name).read_bytes()
    except (FileNotFoundError, OSError):
        return Response("not found", 404, "text/plain")
    response = Response(data, 200, STATIC_TYPES[suffix])
    return response


def create_app(storage_or_app: Any, token: str | None = None) -> Dashboard:
    """The dashboard as an ASGI app over a storage backend or a ``Conveyor`` app.

    Mount it in any ASGI server (``uvicorn``, ``hypercorn``) or serve it with
    ``conveyor.web.server.RunningServer``. ``token`` protects every page and action.
    """
    return Dashboard(storage_or_app, token)
