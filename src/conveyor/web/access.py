"""Who may use the dashboard: its own token, or the check of the application it is mounted in.

Alone, the dashboard authenticates with its token (``create_app(app, token=T)``): a bearer
header, HTTP basic auth with password ``T``, or the session cookie set by ``?token=T``.

Mounted in another application, the host's dependencies and middleware never see the mounted
app's requests (a FastAPI ``Depends`` on the app, Django's login middleware): the host must
hand the dashboard its check, ``create_app(app, authorize=check)``, called with the ASGI
scope of every request. Only ``True`` lets a request in; anything else (``False``, ``None``, a
user object) refuses it, so a check written the wrong way closes the dashboard rather than
opening it. A plain function runs on a thread (it may block: a session lookup in a database);
an ``async def`` is awaited.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlencode

from conveyor.http.asgi import Scope, bearer_or_basic
from conveyor.web import pages
from conveyor.web.http import Request, Response

__all__ = ["SESSION_COOKIE", "Access", "Authorize"]

SESSION_COOKIE = "conveyor_session"
#: The host's check: the ASGI scope of a request in, ``True`` to serve it.
Authorize = Callable[[Scope], "bool | Awaitable[bool]"]

REMOVED = ("delegate_auth=True was removed: a mounted app's requests never reach the host's "
           "dependencies or middleware, so it served an open dashboard; pass "
           "authorize=check, called with each request's ASGI scope and returning True to serve "
           "it (docs/operations.md, Embedding)")


class Access:
    """The dashboard's sign-in rule: open, its own token, or the host's ``authorize`` check."""

    def __init__(self, token: str | None = None, authorize: Authorize | None = None,
                 login_url: str | None = None) -> None:
        if authorize is not None and not callable(authorize):
            raise TypeError("authorize= takes a callable (the request's ASGI scope in, True to "
                            f"serve it), not {type(authorize).__name__}")
        if token and authorize is not None:
            raise ValueError("give the dashboard either a token or authorize=, not both")
        if login_url is not None and authorize is None:
            raise ValueError("login_url= is the host application's sign-in page: it goes with "
                             "authorize=")
        self.token = token or None
        self._authorize = authorize
        self._login_url = login_url

    @property
    def open(self) -> bool:
        """Whether every request is served (no token, no host check)."""
        return self.token is None and self._authorize is None

    def session_value(self) -> str:
        """The session cookie's value: an HMAC of the token, never the token itself."""
        assert self.token is not None
        return hmac.new(self.token.encode(), b"conveyor-session", hashlib.sha256).hexdigest()

    async def check(self, scope: Scope, request: Request) -> str | None:
        """How the request proved itself: ``open``, ``host`` (the host's check said yes),
        ``bearer``, ``basic``, ``cookie`` or ``query`` (the token); None if it did not."""
        if self._authorize is not None:
            return "host" if await self._ask_host(scope) is True else None
        if self.token is None:
            return "open"
        how = bearer_or_basic(request.headers.get("authorization", ""), self.token)
        if how is not None:
            return how
        cookie = request.cookies.get(SESSION_COOKIE, "").encode("latin-1", "replace")
        if cookie and hmac.compare_digest(cookie, self.session_value().encode()):
            return "cookie"
        if request.method == "GET" and hmac.compare_digest(request.arg("token").encode(),
                                                           self.token.encode()):
            return "query"
        return None

    async def _ask_host(self, scope: Scope) -> object:
        check = self._authorize
        assert check is not None
        if _is_async(check):
            answer: object = check(scope)
        else:  # it may block (a database lookup): never on the event loop
            answer = await asyncio.to_thread(check, scope)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    def refuse(self, request: Request) -> Response:
        """The answer to a request that did not sign in: the token form, the host's sign-in
        page (``login_url``, with ``next=`` the address asked for), or 401."""
        page_view = (request.method in ("GET", "HEAD")
                     and not request.path.startswith(("/api/", "/metrics")))
        if page_view and self._login_url is not None:
            asked = request.root + quote(request.path)
            if request.query:
                asked += "?" + urlencode(request.query, doseq=True)
            glue = "&" if "?" in self._login_url else "?"
            response = Response(b"", 303, headers=[
                ("location", f"{self._login_url}{glue}{urlencode({'next': asked})}")])
            response.outside = True  # the host's page: not under the dashboard's prefix
            return response
        if page_view and self.token is not None:
            return pages.login_page()
        return Response("authentication required\n", 401, "text/plain",
                        [("www-authenticate", 'Bearer realm="conveyor"')])


def _is_async(check: Callable[..., object]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(check) or inspect.iscoroutinefunction(
        getattr(check, "__call__", None))  # noqa: B004 - the method, not callable()
