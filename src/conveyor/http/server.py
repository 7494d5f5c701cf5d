"""Serve an ASGI app with uvicorn on a background thread, with limits on slow or many clients.

conveyor parses no HTTP itself: uvicorn's h11 protocol reads requests, and these settings bound
what a client can hold (docs/reliability.md has the measurements):

- ``h11_max_incomplete_event_size``: a request head larger than 16 KiB is refused;
- ``HEAD_TIMEOUT``: a request head must arrive whole within 10 s of the connection opening (or
  of the previous response) — uvicorn has no such timer, so ``_TimedH11`` adds it;
- ``timeout_keep_alive``: an idle kept-alive connection is closed after 5 s;
- at most ``MAX_CONNECTIONS`` (64) open connections: a new one past that closes the
  connection that has waited longest for a request head (a silent or slow client, or an idle
  kept-alive one), so connections that send nothing cannot shut others out before any
  authentication; only when every connection is busy with a request in progress does a new
  request get 503 at once (``limit_concurrency``);
- bodies (1 MiB, 10 s) are limited by ``conveyor.http.asgi.guard``, which every app here wears.

uvicorn is the ``web`` extra: ``pip install 'conveyor[web]'``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from typing import Any

from conveyor.errors import ConveyorError
from conveyor.http.asgi import ASGIApp

HEAD_TIMEOUT = 10.0
KEEP_ALIVE_TIMEOUT = 5
MAX_CONNECTIONS = 64
MAX_HEAD = 16 * 1024


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError:
        raise ConveyorError("serving HTTP needs uvicorn: pip install 'conveyor[web]'") from None
    return uvicorn


def _timed_protocol() -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a deadline on reading each request head."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _waiting_since = 0.0  # when it began waiting for a request head

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_timer()
            if len(self.connections) > MAX_CONNECTIONS:
                self._evict()

        def _waiting(self) -> bool:
            """Waiting for a request head: none yet, or the last response sent."""
            return self.cycle is None or self.cycle.response_complete

        def _evict(self) -> None:
            # The oldest connection that is not in a request makes room for this one; when
            # every other is in a request, none is closed and uvicorn answers this one 503.
            waiting = [c for c in self.connections
                       if c is not self and isinstance(c, TimedH11) and c._waiting()]
            if waiting:
                oldest = min(waiting, key=lambda c: c._waiting_since)
                self.connections.discard(oldest)
                oldest.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._waiting_since = self.loop.time()
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self._head_timed_out)

        def _head_timed_out(self) -> None:
            # A request being answered is the app's business (its body has its own deadline);
            # only a connection still sending a head, or sending nothing, is cut off here.
            if self._waiting() and not self.transport.is_closing():
                self.transport.close()

    return TimedH11


class RunningServer:
    """An ASGI app served by uvicorn on its own thread; ``stop()`` ends it.

    The socket is bound here, in the caller's thread, so a port in use raises ``OSError``
    from ``start()`` instead of ending the server thread.
    """

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self._app, self.host, self.port = app, host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> RunningServer:
        """Bind, start serving, and return once the server accepts connections."""
        uvicorn = _uvicorn()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            # log_config=None: serving must not reconfigure the host process's logging
            self._app, http=_timed_protocol(), lifespan="off", log_config=None,
            access_log=False, server_header=False, timeout_keep_alive=KEEP_ALIVE_TIMEOUT,
            # MAX_CONNECTIONS open, plus the one that finds them all in a request: it gets 503
            limit_concurrency=MAX_CONNECTIONS + 1, h11_max_incomplete_event_size=MAX_HEAD,
            timeout_graceful_shutdown=2)
        server = uvicorn.Server(config)  # off the main thread, it leaves signals alone
        self._server = server
        self._thread = threading.Thread(target=lambda: asyncio.run(server.serve([sock])),
                                        name="conveyor-http", daemon=True)
        self._thread.start()
        while not server.started and self._thread.is_alive():
            self._thread.join(0.01)
        if not server.started:
            raise OSError(f"the HTTP server on {self.host}:{self.port} did not start")
        return self

    @property
    def url(self) -> str:
        """``http://host:port`` of the listening socket."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)

    def wait(self) -> None:
        """Block until the server stops (``conveyor web`` runs until Ctrl-C)."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(0.5)


MIN_TOKEN = 16


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None, what: str) -> None:
    """Refuse to serve ``what`` beyond loopback without a token, or with a guessable one.

    Anyone who can reach a non-loopback address can use the server, so it must demand a token
    of at least ``MIN_TOKEN`` characters (``openssl rand -hex 16`` gives 32).
    """
    if is_loopback(host):
        return
    if not token:
        raise ConveyorError(f"refusing to serve {what} on {host} without a token "
                            "(--token-file or --token): anyone who can reach it could use it")
    if len(token) < MIN_TOKEN:
        raise ConveyorError(f"refusing to serve {what} on {host} with a {len(token)}-character "
                            f"token: use at least {MIN_TOKEN} (e.g. openssl rand -hex 16)")
