"""The dashboard as an ASGI app: authentication, CSRF, routing and the storage thread.

Security model (docs/operations.md): bind to 127.0.0.1 by default; with a token, a request
is let in by ``Authorization: Bearer T``, HTTP basic auth with password ``T``, or the session
cookie set after visiting any page with ``?token=T``; mounted in another application, by that
application's check of each request (``authorize=``, ``web/access.py``). Every state change
is a POST carrying the CSRF token from the ``conveyor_csrf`` cookie (double submit,
SameSite=Strict); GET never changes state. Everything shown from job data is HTML-escaped,
and a strict CSP forbids inline script.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from importlib import resources
from typing import TypeVar
from urllib.parse import quote, urlencode

from conveyor.app import Conveyor
from conveyor.client.payloads import JobData
from conveyor.errors import ConveyorError, StorageError, StorageUnavailable
from conveyor.http import asgi
from conveyor.http.asgi import guard, plain
from conveyor.storage import shown_url
from conveyor.storage.base import Inspector
from conveyor.web import actions, pages, routes
from conveyor.web.access import REMOVED, SESSION_COOKIE, Access, Authorize
from conveyor.web.http import (
    BadRequest,
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
from conveyor.web.lanes import Lanes, watch

CSRF_COOKIE = "conveyor_csrf"
# The result of an action, shown once on the page the POST redirects to. It travels in a cookie
# signed by this process, never in the URL: a link cannot make the dashboard say anything.
FLASH_COOKIE = "conveyor_flash"
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".svg": "image/svg+xml"}
T = TypeVar("T")


class Dashboard:
    """The ASGI application returned by ``create_app``."""

    def __init__(self, source: Conveyor | Inspector, token: str | None = None,
                 hosts: frozenset[str] | None = None, access: Access | None = None,
                 store: str | None = None) -> None:
        self._source = source
        self._store = store if store is not None else _store_line(source)
        self._access = access or Access(token)
        self._flash_key = secrets.token_bytes(32)
        self._guarded = guard(self._serve, asgi.allowed_hosts() if hosts is None else hosts)
        self._lanes = Lanes(lambda: self.inspector)

    @property
    def inspector(self) -> Inspector:
        """The storage: an app's (lazily opened) ``storage``, or the storage itself."""
        if isinstance(self._source, Conveyor):
            return self._source.storage
        return self._source

    @property
    def data(self) -> JobData | None:
        """The app's job data (its keys open sealed jobs on the pages), or None."""
        if isinstance(self._source, Conveyor) and self._source.data.active:
            return self._source.data
        return None

    @property
    def brokered(self) -> bool:
        """Whether the app's jobs are delivered by a broker."""
        return isinstance(self._source, Conveyor) and self._source.broker_url is not None

    async def call(self, func: Callable[[Inspector], T]) -> T:
        """Run a page's blocking storage call on a page thread (``web/lanes.py``)."""
        return await self._lanes.call(func)

    async def call_long(self, func: Callable[[Inspector], T]) -> T:
        """Run a long read (a search) on a long-read thread, never holding a page's."""
        return await self._lanes.call_long(func)

    def stream(self, make: Callable[[Inspector], Iterator[str]],
               gone: threading.Event) -> AsyncIterator[bytes]:
        """An export, produced on a long-read thread chunk by chunk as it is sent."""
        return self._lanes.stream(make, gone)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point (``http`` and ``lifespan``), behind ``conveyor.http.asgi.guard``."""
        await self._guarded(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            request = await Request.read(scope)
            how = None
            if not request.path.startswith("/static/"):
                how = await self._access.check(scope, request)
            if how is not None:  # no body is read before sign-in
                await request.read_form(receive)
            self._take_flash(request)
            request.store = self._store
        except BadRequest as exc:
            await plain(send, 400, str(exc))
            return
        watcher = asyncio.create_task(watch(receive, request.gone)) if how else None
        try:
            response = mount(await self.handle(request, how), request.root)
            await response.send(send)
        except BadRequest as exc:
            await plain(send, 400, str(exc))
        finally:
            if watcher is not None:
                watcher.cancel()

    async def handle(self, request: Request, how: str | None) -> Response:
        """Refuse a request that did not sign in (``how``: ``Access.check``), check CSRF for
        POSTs, route, and give every page a CSRF cookie."""
        if request.path.startswith("/static/"):
            return _static(request.path[len("/static/"):])
        if request.method not in ("GET", "HEAD", "POST"):
            return Response("method not allowed", 405, "text/plain", [("allow", "GET, POST")])
        if how is None:
            return self._access.refuse(request)
        if how == "query":  # drop the token from the address bar and history
            query = {k: v for k, v in request.query.items() if k != "token"}
            suffix = "?" + urlencode(query, doseq=True) if query else ""
            response = redirect(safe_next(quote(request.path) + suffix))
            response.set_cookie(SESSION_COOKIE, self._access.session_value(),
                                secure=request.secure)
            return response
        csrf = request.cookies.get(CSRF_COOKIE, "")
        if not _plain_token(csrf):
            csrf = secrets.token_urlsafe(24)
        try:
            if request.method == "POST":
                response = await self._post(request, csrf, bearer=(how == "bearer"))
            else:
                response = await routes.route(self, request, csrf)
        except ConveyorError as exc:
            status = _status_of(exc)
            if request.path.startswith("/api/"):
                response = json_response({"error": str(exc)}, status)
            else:
                response = pages.error_page(str(exc), status, csrf)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, secure=request.secure)
        if request.flash and response.status == 200 and request.arg("partial") != "1":
            response.set_cookie(FLASH_COOKIE, "", secure=request.secure, max_age=0)  # shown
        return response

    async def _post(self, request: Request, csrf: str, bearer: bool) -> Response:
        origin = request.headers.get("origin")
        host = request.headers.get("host", "")
        if origin and origin.split("://", 1)[-1] != host:
            return Response("cross-origin POST refused", 403, "text/plain")
        if not bearer:
            sent = request.field("csrf")
            if not sent.isascii():  # a token this app made is URL-safe base64
                raise BadRequest("malformed CSRF field: reload the page and try again")
            if not (sent and hmac.compare_digest(sent.encode(), csrf.encode())):
                return Response("missing or wrong CSRF token; reload the page and try again",
                                403, "text/plain")
        by = f"dashboard {request.client}".rstrip()
        result = await self.call(lambda insp: actions.perform(insp, request.path, request.form,
                                                              by))
        if request.headers.get("accept", "").startswith("application/json"):
            return json_response({"ok": True, "message": result})
        response = redirect(safe_next(request.field("next"), "/"))
        response.set_cookie(FLASH_COOKIE, self._sign(result), secure=request.secure,
                            max_age=60)
        return response

    def _sign(self, message: str) -> str:
        # no "=" padding: the value must need no quoting in a cookie
        data = base64.urlsafe_b64encode(message.encode("utf-8", "backslashreplace")
                                        ).decode().rstrip("=")
        mac = hmac.new(self._flash_key, data.encode(), hashlib.sha256).hexdigest()
        return f"{data}.{mac}"

    def _take_flash(self, request: Request) -> None:
        """The flash message from this process's signed cookie; anything else is ignored."""
        data, _, mac = request.cookies.get(FLASH_COOKIE, "").partition(".")
        good = hmac.new(self._flash_key, data.encode("latin-1", "replace"),
                        hashlib.sha256).hexdigest()
        if data and hmac.compare_digest(mac.encode("latin-1", "replace"), good.encode()):
            try:
                request.flash = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError):
                request.flash = ""


def _status_of(exc: ConveyorError) -> int:
    """404 for an unknown job or batch, 503 when the storage is down, 500 when it answered
    with an error, else 400."""
    if isinstance(exc, LookupError):
        return 404
    if isinstance(exc, StorageUnavailable):
        return 503
    return 500 if isinstance(exc, StorageError) else 400


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
    missing = Response("no static file of that name", 404, "text/plain")
    if "/" in name or "\\" in name or name.startswith(".") or suffix not in STATIC_TYPES:
        return missing
    try:
        data = resources.files("conveyor.web").joinpath("static").joinpath(name).read_bytes()
    except (FileNotFoundError, OSError):
        return missing
    response = Response(data, 200, STATIC_TYPES[suffix])
    return response


def _plain_token(value: str) -> bool:
    """A CSRF cookie as this app makes them (URL-safe base64); anything else is replaced."""
    return 16 <= len(value) <= 64 and value.isascii() and value.replace("-", "").replace(
        "_", "").isalnum()


def _store_line(source: Conveyor | Inspector) -> str:
    """``store URL`` of an app or a storage (credentials masked), or nothing for an object
    that has no URL."""
    url = source.url if isinstance(source, Conveyor) else getattr(source, "url", None)
    return f"store {shown_url(url)[0]}" if isinstance(url, str) else ""


def create_app(storage_or_app: Conveyor | Inspector, token: str | None = None, *,
               allowed_hosts: Iterable[str] = (), authorize: Authorize | None = None,
               login_url: str | None = None, delegate_auth: bool = False,
               store: str | None = None) -> Dashboard:
    """The dashboard as an ASGI app over a storage backend or a ``Conveyor`` app.

    Mount it in any ASGI server (``uvicorn``, ``hypercorn``) or serve it with
    ``conveyor.http.server.RunningServer``. ``token`` protects every page and action.

    Requests are served only when their ``Host`` is a loopback name, an IP address or one of
    ``allowed_hosts`` (the names the dashboard is reached by, e.g. ``["ops.example.com"]``,
    or ``[".example.com"]`` for a domain and its subdomains; ``["*"]`` turns the check off,
    for a proxy that checks it): a page elsewhere that re-points its own name at this server
    (DNS rebinding) is refused with 421.

    Mounted in another application, pass that application's check instead of a token:
    ``authorize`` is called with the ASGI scope of every request and lets it in only when it
    returns ``True`` (a plain function runs on a thread, an ``async def`` is awaited; see
    ``conveyor.web.access``). A refused page view goes to ``login_url`` (the host's sign-in
    page, with ``next=`` the address asked for), else gets 401. The CSRF check of every
    action and the Host check stay on. ``delegate_auth`` is refused: it left the dashboard
    open whenever the host's authentication did not run for it, which mounting ensures.

    Every page names the store it reads in its header: ``store``, else the URL of the app or
    storage given (credentials masked, a relative file path made absolute).
    """
    if delegate_auth:
        raise ValueError(REMOVED)
    access = Access(token, authorize, login_url)
    return Dashboard(storage_or_app, hosts=asgi.allowed_hosts(allowed_hosts), access=access,
                     store=store)
