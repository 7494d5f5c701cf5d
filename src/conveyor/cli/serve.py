"""``conveyor web`` (the dashboard) and ``conveyor metrics`` (Prometheus text).

Both are served by uvicorn (``conveyor.http.server``) behind ``conveyor.http.asgi.guard``; beyond
loopback both demand a token of at least 16 characters. The token comes from a file, the
environment or (visible in ``ps``, so last) the command line.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path
from typing import Any

from conveyor.cli.common import add_source_args, open_backend
from conveyor.cli.terminal import say
from conveyor.errors import ConveyorError
from conveyor.http.metrics import render_inspector, serve_metrics
from conveyor.http.server import RunningServer, check_exposure
from conveyor.web import create_app

WEB_TOKEN_ENV = "CONVEYOR_WEB_TOKEN"
METRICS_TOKEN_ENV = "CONVEYOR_METRICS_TOKEN"


def _add_server_args(parser: argparse.ArgumentParser, port: int, env: str) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind; anything but loopback needs a token")
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--token-file", default=None, metavar="PATH",
                        help=f"read the access token from this file (else --token, else ${env})")
    parser.add_argument("--token", default=None,
                        help="access token; visible to other users in ps, prefer --token-file "
                             f"or ${env}")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="a host name clients use to reach this server (repeatable); "
                             "loopback names and IP addresses are always allowed")


def register(sub: Any) -> None:
    """Add ``web`` and ``metrics``."""
    web = sub.add_parser("web", help="serve the dashboard (default http://127.0.0.1:8080)")
    _add_server_args(web, 8080, WEB_TOKEN_ENV)
    add_source_args(web, json_flag=False)
    web.set_defaults(func=cmd_web)
    metrics = sub.add_parser("metrics", help="serve Prometheus metrics at /metrics")
    _add_server_args(metrics, 9100, METRICS_TOKEN_ENV)
    metrics.add_argument("--once", action="store_true", help="print the metrics once and exit")
    add_source_args(metrics, json_flag=False)
    metrics.set_defaults(func=cmd_metrics)


def read_token(args: argparse.Namespace, env: str) -> str | None:
    """The token from ``--token-file``, else ``--token``, else ``$env``; None if none is set."""
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConveyorError(f"cannot read the token file {args.token_file}: "
                                f"{getattr(exc, 'strerror', None) or exc}") from None
        if not token:
            raise ConveyorError(f"the token file {args.token_file} is empty")
        return token
    return args.token or os.environ.get(env) or None


def cmd_web(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted."""
    token = read_token(args, WEB_TOKEN_ENV)
    check_exposure(args.host, token, "the dashboard")
    with open_backend(args) as backend:
        app = create_app(backend, token, allowed_hosts=[args.host, *args.allow_host],
                         store=args.source.line())
        try:
            server = RunningServer(app, args.host, args.port).start()
        except OSError as exc:
            raise ConveyorError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
        say(f"conveyor web on {server.url}{' — token required' if token else ''}", flush=True)
        try:
            server.wait()
        finally:
            server.stop()
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    """Serve (or print once) the scrape-time metrics."""
    token = None if args.once else read_token(args, METRICS_TOKEN_ENV)
    if not args.once:
        check_exposure(args.host, token, "metrics")
    with open_backend(args) as backend:
        if args.once:
            say(render_inspector(backend), end="")
            return 0
        lock = threading.Lock()  # one scrape at a time on the single connection

        def produce() -> str:
            with lock:
                return render_inspector(backend)

        try:
            server = serve_metrics(produce, args.host, args.port, token=token,
                                   allowed_hosts=args.allow_host)
        except OSError as exc:
            raise ConveyorError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
        say(f"conveyor metrics on {server.url}/metrics"
            f"{' — token required' if token else ''}", flush=True)
        try:
            server.wait()
        finally:
            server.stop()
    return 0
