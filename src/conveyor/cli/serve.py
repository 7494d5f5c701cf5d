"""``conveyor web`` (the dashboard) and ``conveyor metrics`` (Prometheus text)."""

from __future__ import annotations

import argparse
import os
import threading
from typing import Any

from conveyor.cli.common import add_source_args, open_backend, storage_url
from conveyor.cli.terminal import say
from conveyor.cli.worker import load_app
from conveyor.errors import ConveyorError
from conveyor.metrics import render_inspector, serve_metrics
from conveyor.storage import open_storage, redact
from conveyor.web import RunningServer, create_app


def register(sub: Any) -> None:
    """Add ``web`` and ``metrics``."""
    web = sub.add_parser("web", help="serve the dashboard (default http://127.0.0.1:8080)")
    web.add_argument("--host", default="127.0.0.1",
                     help="address to bind; anything but localhost needs --token")
    web.add_argument("--port", type=int, default=8080)
    web.add_argument("--token", default=None,
                     help="access token (default: $CONVEYOR_WEB_TOKEN); "
                          "sign in with ?token=T, Bearer or basic auth")
    add_source_args(web, json_flag=False)
    web.set_defaults(func=cmd_web)
    metrics = sub.add_parser("metrics", help="serve Prometheus metrics at /metrics")
    metrics.add_argument("--host", default="127.0.0.1")
    metrics.add_argument("--port", type=int, default=9100)
    metrics.add_argument("--once", action="store_true", help="print the metrics once and exit")
    add_source_args(metrics, json_flag=False)
    metrics.set_defaults(func=cmd_metrics)


def _is_local(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1")


def cmd_web(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted."""
    token = args.token or os.environ.get("CONVEYOR_WEB_TOKEN") or None
    if not _is_local(args.host) and not token:
        raise ConveyorError(f"refusing to serve the dashboard on {args.host} without --token: "
                            "anyone who can reach it could retry or delete jobs")
    source = load_app(args.app) if args.app else open_storage(storage_url(args))
    try:
        server = RunningServer(create_app(source, token), args.host, args.port).start()
    except OSError as exc:
        raise ConveyorError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
    where = args.app or redact(storage_url(args))
    say(f"conveyor web on {server.url} ({where}){' — token required' if token else ''}",
          flush=True)
    try:
        server.wait()
    finally:
        server.stop()
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    """Serve (or print once) the scrape-time metrics."""
    with open_backend(args) as backend:
        if args.once:
            say(render_inspector(backend), end="")
            return 0
        lock = threading.Lock()  # one scrape at a time on the single connection

        def produce() -> str:
            with lock:
                return render_inspector(backend)

        try:
            server = serve_metrics(produce, args.host, args.port)
        except OSError as exc:
            raise ConveyorError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
        say(f"conveyor metrics on http://{args.host}:{server.server_address[1]}/metrics",
              flush=True)
        try:
            threading.Event().wait()
        finally:
            server.shutdown()
    return 0
