"""A minimal HTTP/1.1 server for ASGI apps, so ``conveyor web`` needs no extra package.

One request per connection (``Connection: close``), bodies up to 1 MiB, whole responses:
enough for a dashboard used by a handful of operators. ``create_app`` returns a standard ASGI
app, so production deployments can serve it with uvicorn or hypercorn instead.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from conveyor.web.http import MAX_BODY, Message

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]
HEADER_TIMEOUT = 30.0
log = logging.getLogger("conveyor.web")


async def _respond(writer: asyncio.StreamWriter, status: int, headers: list[tuple[bytes, bytes]],
                   body: bytes) -> None:
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    head = [f"HTTP/1.1 {status} {reason}".encode()]
    head += [k + b": " + v for k, v in headers if k.lower() not in (b"connection",)]
    head.append(b"connection: close")
    writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
    await writer.drain()


def _parse_head(head: bytes) -> tuple[str, str, list[tuple[bytes, bytes]]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = []
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers.append((name.strip().lower().encode("latin-1"),
                            value.strip().encode("latin-1")))
    return method, target, headers


async def _handle(app: ASGIApp, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT)
        method, target, headers = _parse_head(head)
        length = int(dict(headers).get(b"content-length", b"0") or 0)
        if length > MAX_BODY:
            await _respond(writer, 413, [], b"request body too large")
            return
        body = await reader.readexactly(length) if length else b""
        await _run_app(app, writer, method, target, headers, body)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
            ValueError, ConnectionError):
        pass  # a client that hung up or sent garbage gets no answer
    finally:
        writer.close()


async def _run_app(app: ASGIApp, writer: asyncio.StreamWriter, method: str, target: str,
                   headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    path, _, query = target.partition("?")
    peer = writer.get_extra_info("peername") or ("", 0)
    sock = writer.get_extra_info("sockname") or ("", 0)
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query.encode("latin-1"), "headers": headers,
        "client": (peer[0], peer[1]), "server": (sock[0], sock[1]),
    }
    received = False
    start: Message = {}
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal received
        if received:
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    try:
        await app(scope, receive, send)
    except Exception:
        log.exception("error serving %s %s", method, path)
        await _respond(writer, 500, [], b"internal server error")
        return
    await _respond(writer, int(start.get("status", 500)), list(start.get("headers", [])),
                   b"".join(chunks))


class RunningServer:
    """A server running on its own thread and event loop; ``stop()`` ends it."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self._app, self.host, self.port = app, host, port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped = asyncio.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="conveyor-web", daemon=True)

    def start(self) -> RunningServer:
        """Start and wait until the socket listens (raises if it cannot bind)."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        try:
            server = await asyncio.start_server(
                lambda r, w: _handle(self._app, r, w), self.host, self.port)
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopped.wait()

    @property
    def url(self) -> str:
        """``http://host:port`` of the listening socket."""
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop listening and join the thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)

    def wait(self) -> None:
        """Block until the server stops (``conveyor web`` runs until Ctrl-C)."""
        while self._thread.is_alive():
            self._thread.join(0.5)
