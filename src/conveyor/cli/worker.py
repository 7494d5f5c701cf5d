"""``conveyor worker APP``: run worker processes for an app given as ``module:attribute``."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Any

from conveyor.app import Conveyor
from conveyor.errors import ConveyorError
from conveyor.worker.config import QueueWeight, WorkerConfig, parse_queue
from conveyor.worker.launcher import Launcher
from conveyor.worker.logs import configure_logging
from conveyor.worker.supervisor import Supervisor

__all__ = ["AppLoadError", "WorkerOptionError", "build_config", "load_app", "register"]


class AppLoadError(ConveyorError):
    """The ``module:attribute`` given to ``conveyor worker`` could not be loaded."""


class WorkerOptionError(ConveyorError):
    """A ``conveyor worker`` flag has a value a worker cannot run with."""


def load_app(spec: str) -> Conveyor:
    """Import ``module:attribute`` (the current directory is on ``sys.path``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppLoadError(f"app {spec!r} must look like module:attribute, e.g. myapp:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppLoadError(f"cannot import {module_name!r}: {exc}") from exc
    app: Any = module
    for part in attr.split("."):
        app = getattr(app, part, None)
        if app is None:
            raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}")
    if not isinstance(app, Conveyor):
        raise AppLoadError(f"{spec} is a {type(app).__name__}, not a conveyor.Conveyor app")
    return app


def _queue(text: str) -> QueueWeight:
    try:
        return parse_queue(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    """Add the ``worker`` sub-command."""
    p = subparsers.add_parser("worker", help="run worker processes",
                              description="Run jobs of APP (module:attribute).")
    p.add_argument("app", help="the app, as module:attribute (e.g. myapp:app)")
    p.add_argument("-q", "--queue", dest="queues", action="append", type=_queue,
                   metavar="NAME[,WEIGHT]", help="queue to work (repeat); default: default")
    p.add_argument("-c", "--concurrency", type=int, default=10, help="jobs at once per process")
    p.add_argument("--processes", type=int, default=1, help="worker processes to fork")
    p.add_argument("--timeout", type=float, default=25.0,
                   help="seconds to wait for running jobs at stop before putting them back")
    p.add_argument("--strict", action="store_true", help="poll queues in the order given")
    p.add_argument("--lease", type=float, default=10.0, help="lease seconds (default 10)")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-file", default=None, help="log to this file (USR2 reopens it)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ...")
    p.add_argument("--url", default=None, help="storage URL (overrides the app's and CONVEYOR_URL)")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> WorkerConfig:
    """The ``WorkerConfig`` the flags describe; ``ConveyorError`` on bad values."""
    try:
        return WorkerConfig(
            queues=tuple(args.queues or [QueueWeight("default")]),
            strict=args.strict,
            concurrency=args.concurrency,
            shutdown_timeout=args.timeout,
            lease=args.lease,
            heartbeat_interval=min(2.0, args.lease / 5),
        )
    except ValueError as exc:
        raise WorkerOptionError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    """Load the app and run one worker, or a supervisor of ``--processes`` workers."""
    configure_logging(args.log_format, args.log_file, getattr(logging, args.log_level.upper(),
                                                               logging.INFO))
    url = args.url or os.environ.get("CONVEYOR_URL")
    app = load_app(args.app)
    if url and url != app.url:
        app.close()  # in case importing the app already opened the old storage
        app.url = url
    build_config(args)  # fail fast on bad flags, before forking
    if args.processes < 1:
        raise WorkerOptionError("--processes must be at least 1")

    def body() -> int:
        # A fresh config per process: each gets its own worker id.
        launcher = Launcher(app, build_config(args))
        try:
            code = launcher.run()
        finally:
            app.close()
        if launcher.threads.abandoned or len(launcher.inflight):
            # Stuck job threads cannot be joined; leave without waiting for them.
            logging.shutdown()
            os._exit(code)
        return code

    if args.processes > 1:
        return Supervisor(args.processes, body, shutdown_timeout=args.timeout).run()
    return body()
