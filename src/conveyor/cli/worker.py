"""``conveyor worker APP``: run worker processes for an app given as ``module:attribute``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from typing import Any

from conveyor.broker import open_broker
from conveyor.cli.apps import AppLoadError, find_app, load_app
from conveyor.cli.source import app_source
from conveyor.errors import ConveyorError
from conveyor.storage import open_storage
from conveyor.storage.outbox import as_outbox
from conveyor.worker.config import QueueWeight, WorkerConfig, parse_queue
from conveyor.worker.launcher import Launcher
from conveyor.worker.logs import configure_logging
from conveyor.worker.supervisor import Supervisor

__all__ = ["AppLoadError", "WorkerOptionError", "build_config", "cores", "load_app",
           "plan_processes", "register"]

log = logging.getLogger("conveyor.worker")


class WorkerOptionError(ConveyorError):
    """A ``conveyor worker`` flag has a value a worker cannot run with."""


def _queue(text: str) -> QueueWeight:
    try:
        return parse_queue(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    """Add the ``worker`` sub-command."""
    p = subparsers.add_parser("worker", help="run worker processes",
                              description="Run jobs of APP (module:attribute).")
    p.add_argument("app", nargs="?", default=None,
                   help="the app, as module:attribute (e.g. myapp:app); default: "
                        "$CONVEYOR_APP, else [tool.conveyor] app in pyproject.toml")
    p.add_argument("-q", "--queue", dest="queues", action="append", type=_queue,
                   metavar="NAME[,WEIGHT]", help="queue to work (repeat); default: default")
    p.add_argument("-c", "--concurrency", type=int, default=10, help="jobs at once per process")
    p.add_argument("--processes", type=int, default=None,
                   help="worker processes to fork under a supervisor (default: one per CPU "
                        "core; 1 runs a single process without a supervisor)")
    p.add_argument("--reserve", type=int, default=None, metavar="N",
                   help="jobs a process may lease ahead of its free slots while its jobs are "
                        "short (at most what it starts in 50 ms; default: 16 times -c; "
                        "0: never)")
    p.add_argument("--timeout", type=float, default=25.0,
                   help="seconds to wait for running jobs at stop before putting them back")
    p.add_argument("--strict", action="store_true", help="poll queues in the order given")
    p.add_argument("--lease", type=float, default=10.0, help="lease seconds (default 10)")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-file", default=None, help="log to this file (USR2 reopens it)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ...")
    p.add_argument("--url", default=None,
                   help="storage URL (overrides the app's, which is its Conveyor(url), else "
                        "CONVEYOR_URL, else the default)")
    p.add_argument("--broker", default=None,
                   help="broker URL that delivers jobs, e.g. amqp://… (overrides the app's and "
                        "CONVEYOR_BROKER; docs/brokers.md)")
    p.add_argument("--executor", choices=("thread", "process"), default="thread",
                   help="where def jobs run: the thread pool (default), or job processes the "
                        "worker kills at a job's timeout (a job's own executor= wins)")
    p.add_argument("--max-jobs-per-child", type=int, default=0, metavar="N",
                   help="replace a process after it ran N jobs (it finishes what it runs "
                        "first; 0: never)")
    p.add_argument("--max-memory-per-child", type=int, default=0, metavar="MIB",
                   help="replace a process whose resident memory passed MIB MiB after a job "
                        "(0: never)")
    p.add_argument("--republish-after", type=float, default=300.0, metavar="SECONDS",
                   help="with a broker: publish again a job published this long ago that no "
                        "worker started (a message the broker lost; default 300)")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace, worker_id: str | None = None,
                 app: str = "") -> WorkerConfig:
    """The ``WorkerConfig`` the flags describe (``app``: the app's ``module:attribute``, for
    job processes); ``ConveyorError`` on bad values."""
    try:
        config = WorkerConfig(
            queues=tuple(args.queues or [QueueWeight("default")]),
            strict=args.strict,
            concurrency=args.concurrency,
            reserve=args.reserve,
            shutdown_timeout=args.timeout,
            lease=args.lease,
            heartbeat_interval=min(2.0, args.lease / 5),
            republish_after=args.republish_after,
            executor=getattr(args, "executor", "thread"),
            app=app,
            max_jobs_per_child=getattr(args, "max_jobs_per_child", 0),
            max_memory_per_child=getattr(args, "max_memory_per_child", 0),
        )
    except ValueError as exc:
        raise WorkerOptionError(str(exc)) from exc
    return dataclasses.replace(config, worker_id=worker_id) if worker_id else config


def cores() -> int:
    """CPU cores this process may run on (its affinity mask, so a container's cpuset counts)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


def plan_processes(requested: int | None) -> tuple[int, bool]:
    """How many worker processes to run, and whether under a supervisor.

    ``--processes N`` is taken as given, and 1 runs a single process without a supervisor (an
    init system or orchestrator restarts it). The default is one process per core under a
    supervisor, even on one core: a crashed process is then restarted and its jobs handed back
    at once.
    """
    if requested is not None:
        if requested < 1:
            raise WorkerOptionError("--processes must be at least 1")
        return requested, requested > 1
    processes = cores()
    log.info("starting %d worker processes (one per core; --processes to change)", processes)
    return processes, True


def run(args: argparse.Namespace) -> int:
    """Load the app and run its workers: a supervisor of one process per core by default, of
    ``--processes N``, or with ``--processes 1`` a single worker process without one."""
    configure_logging(args.log_format, args.log_file, getattr(logging, args.log_level.upper(),
                                                               logging.INFO))
    spec = find_app(args.app, "the command line")
    if spec is None:
        raise AppLoadError("no app to run: give one (conveyor worker myapp:app), set "
                           "CONVEYOR_APP=myapp:app, or add [tool.conveyor] app = \"myapp:app\" "
                           "to pyproject.toml")
    app = load_app(spec.spec, spec.root)
    source = app_source(spec, app, args.url)
    if source.url != app.url:
        app.close()  # in case importing the app already opened the old storage
        app.url = source.url
    if args.broker:
        app.broker_url = args.broker
    config = build_config(args, app=spec.spec)  # fail fast on bad flags, before forking
    processes, supervised = plan_processes(args.processes)
    if not supervised and (config.max_jobs_per_child or config.max_memory_per_child):
        log.warning("--processes 1 runs no supervisor: the worker process itself is never "
                    "recycled (job processes of --executor process are)")

    def body(worker_id: str | None = None) -> int:
        # A fresh config per process: each gets its own worker id (a supervisor's choice).
        launcher = Launcher(app, build_config(args, worker_id, spec.spec), recycle=supervised)
        try:
            code = launcher.run()
        finally:
            app.close()
        if launcher.threads.abandoned or len(launcher.inflight):
            # Stuck job threads cannot be joined; leave without waiting for them.
            logging.shutdown()
            os._exit(code)
        return code

    def release(worker_id: str) -> int:
        # In the supervisor's short-lived helper: the storage opened here dies with it.
        try:
            return app.storage.release_worker(worker_id, config.max_recoveries)
        finally:
            app.close()

    if not supervised:
        app.storage.now()  # a store that cannot be opened is one error line, no log first
        log.info("%s", source.line())
        return body()
    # Fail at start with one line, as a single process does, when the storage cannot be opened
    # (a bad URL, a server down), rather than let every child crash in a restart loop. A store
    # of its own, closed before the first fork: the app is left as it was, and the supervisor
    # holds no connection.
    probe = open_storage(app.url, app.clock)
    try:
        probe.now()
        probe.check_server()  # a store this worker could not write: one line, no fork
        if app.broker_url:  # the same for the broker, and a store that cannot feed one
            as_outbox(probe)
            open_broker(app.broker_url).close()
    finally:
        probe.close()
    log.info("%s", source.line())
    return Supervisor(processes, body, shutdown_timeout=args.timeout, release=release).run()
