"""What a hostile client can do to the HTTP servers: wrong Host, huge or slow bodies, slow heads.

Raw sockets against the real uvicorn-served apps; no test asserts on a duration: each waits
for the server's answer (or for it to close the connection) with a generous socket timeout.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.http import asgi, server
from conveyor.http.asgi import MAX_BODY
from conveyor.http.metrics import serve_metrics
from conveyor.http.server import RunningServer
from conveyor.web import create_app
from tests.web.conftest import Site
from tests.web.seed import make_app

WAIT = 30.0  # far above any timeout under test; reaching it fails the test


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (or resets) the connection."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:  # closed with our unread bytes still in its buffer
            return data
        if not chunk:
            return data
        data += chunk


def _head(method: str, path: str, host: str, *extra: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *extra, "", ""]
    return "\r\n".join(lines).encode()


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def _body(reply: bytes) -> bytes:
    return reply.partition(b"\r\n\r\n")[2]


def _get(port: int, path: str, host: str) -> bytes:
    with _connect(port) as sock:
        sock.sendall(_head("GET", path, host, "Connection: close"))
        return _read_all(sock)


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}",
                                  "LOCALHOST", "10.1.2.3:8080", "ops.example.com",
                                  "ops.example.com.:{port}"])
def test_hosts_the_dashboard_answers_to(tmp_path: Any, host: str) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'h.db'}")
    running = RunningServer(create_app(app, allowed_hosts=["ops.example.com"]), "127.0.0.1",
                            0).start()
    try:
        assert _status(_get(running.port, "/api/stats", host.format(port=running.port))) == 200
    finally:
        running.stop()
        app.close()


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "localhost.evil.example",
                                  "127.0.0.1.nip.io", ""])
def test_dns_rebinding_hosts_are_refused(site: Site, host: str) -> None:
    reply = _get(site.server.port, "/api/stats", host)
    assert _status(reply) == 421
    assert _body(reply).count(b"\n") == 1 and b"--allow-host" in _body(reply)
    # and no state change gets through either
    with _connect(site.server.port) as sock:
        form = f"op=kill&ids={site.seeded.ids['scheduled']}".encode()
        sock.sendall(_head("POST", "/action", host, "Content-Type: "
                           "application/x-www-form-urlencoded", f"Content-Length: {len(form)}",
                           "Connection: close") + form)
        assert _status(_read_all(sock)) == 421
    assert site.state("scheduled") == "scheduled"


def test_oversize_body_is_refused_unread_and_the_connection_closed(site: Site) -> None:
    with _connect(site.server.port) as sock:
        # Only the head is sent: the answer comes without a byte of the 2 MiB body.
        sock.sendall(_head("POST", "/action", "127.0.0.1",
                           "Content-Type: application/x-www-form-urlencoded",
                           f"Content-Length: {2 * MAX_BODY}"))
        reply = _read_all(sock)  # returns only because the server closes the connection
    assert _status(reply) == 413 and b"connection: close" in reply.lower()
    assert _body(reply).count(b"\n") == 1


def test_chunked_body_is_cut_at_the_limit(site: Site) -> None:
    chunk = b"x" * 65536
    with _connect(site.server.port) as sock:
        sock.sendall(_head("POST", "/action", "127.0.0.1", "Transfer-Encoding: chunked",
                           "Content-Type: application/x-www-form-urlencoded"))
        try:  # 64 KiB past the limit, and then the client waits without ending the body
            for _ in range(MAX_BODY // len(chunk) + 1):
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        except ConnectionError:  # the server closed while we were still sending
            pass
        reply = _read_all(sock)
    # 413, or a reset that ate it (the server closed with our bytes unread); a server that
    # waited for the rest of the body would answer 408 once the body deadline passed.
    assert reply == b"" or _status(reply) == 413


def _echo_app() -> asgi.ASGIApp:
    """An app that reads the whole body and says how long it was (behind a 0.5 s deadline)."""

    async def app(scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await asgi.plain(send, 200, f"read {size} bytes")

    return asgi.guard(app, asgi.allowed_hosts(), body_timeout=0.5)


@pytest.fixture
def echo() -> Iterator[RunningServer]:
    running = RunningServer(_echo_app(), "127.0.0.1", 0).start()
    yield running
    running.stop()


def test_a_body_that_stops_arriving_gets_408_and_the_connection_closed(
        echo: RunningServer) -> None:
    with _connect(echo.port) as sock:
        sock.sendall(_head("POST", "/", "127.0.0.1", "Content-Length: 1000") + b"x" * 10)
        reply = _read_all(sock)  # the client never sends the rest; the server gives up
    assert _status(reply) == 408 and b"connection: close" in reply.lower()


def test_a_whole_body_within_the_limit_is_read(echo: RunningServer) -> None:
    with _connect(echo.port) as sock:
        sock.sendall(_head("POST", "/", "127.0.0.1", f"Content-Length: {MAX_BODY}",
                           "Connection: close") + b"y" * MAX_BODY)
        reply = _read_all(sock)
    assert _status(reply) == 200 and _body(reply) == f"read {MAX_BODY} bytes\n".encode()


def test_a_silent_or_slow_head_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "HEAD_TIMEOUT", 0.3)
    running = RunningServer(_echo_app(), "127.0.0.1", 0).start()
    try:
        with _connect(running.port) as silent, _connect(running.port) as slow:
            slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its head
            assert _read_all(silent) == b"" and _read_all(slow) == b""
    finally:
        running.stop()


def test_silent_connections_cannot_shut_others_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: 64 connections that never finish a head gave everyone 503 for 10 s windows,
    before any authentication. Now a new connection past the limit closes the one that has
    waited longest for a head, so a client that sends its request is served."""
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 2)
    running = RunningServer(_echo_app(), "127.0.0.1", 0).start()
    try:
        with _connect(running.port) as a, _connect(running.port) as b:
            a.sendall(b"GET / HTTP/1.1\r\n")  # two connections held open, heads unfinished
            b.sendall(b"GET / HTTP/1.1\r\n")
            assert _status(_get(running.port, "/", "127.0.0.1")) == 200
            assert _read_all(a) == b""  # the oldest silent one made room
            assert _status(_get(running.port, "/", "127.0.0.1")) == 200
    finally:
        running.stop()


def test_503_only_when_every_connection_is_in_a_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection in a request is never closed to make room: past the limit with every
    connection busy, the new request gets 503 at once, and the others finish."""
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 2)
    release, started = threading.Event(), threading.Semaphore(0)

    async def slow(scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope["type"] == "http":
            started.release()
            await asyncio.to_thread(release.wait, WAIT)
            await asgi.plain(send, 200, "done")

    running = RunningServer(slow, "127.0.0.1", 0).start()
    try:
        with _connect(running.port) as a, _connect(running.port) as b:
            for sock in (a, b):
                sock.sendall(_head("GET", "/", "127.0.0.1", "Connection: close"))
            assert started.acquire(timeout=WAIT) and started.acquire(timeout=WAIT)
            assert _status(_get(running.port, "/", "127.0.0.1")) == 503
            release.set()
            assert _status(_read_all(a)) == 200 and _status(_read_all(b)) == 200
    finally:
        release.set()
        running.stop()


def test_metrics_server_checks_host_and_token(tmp_path: Any) -> None:
    token = "t" * 20
    running = serve_metrics(lambda: "up 1\n", "127.0.0.1", 0, token=token)
    try:
        assert _status(_get(running.port, "/metrics", "127.0.0.1")) == 401
        assert _status(_get(running.port, "/metrics", "evil.example")) == 421
        with _connect(running.port) as sock:
            sock.sendall(_head("GET", "/metrics", "localhost", f"Authorization: Bearer {token}",
                               "Connection: close"))
            reply = _read_all(sock)
        assert _status(reply) == 200 and _body(reply) == b"up 1\n"
    finally:
        running.stop()


def test_no_body_is_read_before_sign_in(locked_site: Site) -> None:
    with _connect(locked_site.server.port) as sock:
        # A head promising 1 MiB, and not a byte of it: the 401 comes anyway, and the close.
        sock.sendall(_head("POST", "/action", "127.0.0.1", f"Content-Length: {MAX_BODY}",
                           "Content-Type: application/x-www-form-urlencoded"))
        reply = _read_all(sock)
    assert _status(reply) == 401 and b"connection: close" in reply.lower()
