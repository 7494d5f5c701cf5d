"""A job process: runs the ``def`` jobs its worker hands it, one at a time, where the worker
can kill it at a job's timeout (docs/worker.md, "Executors").

Started by the worker (``worker/job_processes.py``) as ``python -m conveyor.worker.job_process
IN OUT PARENT``: it reads frames (``worker/frames.py``) on the pipe ``IN`` and writes them on
``OUT``. It imports the worker's app itself (``module:attribute``, with the worker's
``sys.path``), so each job runs through the same ``Processor`` path as in a thread: payload
decoding, middleware, ``current_job()``, messages and progress (sent to the worker about
twice a second, which writes them as it does for any long job), outcome mapping, log lines and
error hooks (called here, with the job's real exception). A cancellation the worker learns of
reaches the job's context. What the job enqueues goes through this process's own storage
connection, opened on first use.

It dies with its worker (``PR_SET_PDEATHSIG`` on Linux, and a watch of its parent elsewhere),
so a job never runs on after the worker that held its lease is gone, and it ignores the
signals an operator or init system sends the worker's process group (TERM, INT, TSTP...):
its worker decides when it stops.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import queue
import signal
import sys
import threading
from typing import Any

from conveyor.core.job import Ack
from conveyor.worker.frames import (
    Closed,
    ack_to_wire,
    leased_from_wire,
    read_frame,
    write_frame,
)
from conveyor.worker.inflight import Entry
from conveyor.worker.logs import configure_logging
from conveyor.worker.processor import Processor
from conveyor.worker.recycling import Recycling

__all__ = ["main"]

log = logging.getLogger("conveyor.worker")

#: Seconds between two sends of a running job's messages and progress.
FLUSH_EVERY = 0.5
_PR_SET_PDEATHSIG = 1
_IGNORED = ("SIGINT", "SIGTERM", "SIGTSTP", "SIGUSR1", "SIGUSR2", "SIGTTIN", "SIGHUP")


def _die_with(parent: int) -> None:
    """Be killed when the worker ``parent`` ends, however it ends."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
            pass
    if os.getppid() != parent:  # it ended before the line above took effect
        os._exit(1)

    def watch() -> None:  # where there is no PDEATHSIG, and as a second guard
        while True:
            threading.Event().wait(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="conveyor-parent-watch", daemon=True).start()


def _import_app(spec: str) -> Any:
    module, _, attribute = spec.partition(":")
    app = importlib.import_module(module)
    for part in attribute.split("."):
        app = getattr(app, part)
    return app


class _Runner:
    """Runs one job at a time and answers the worker, under one lock for the pipe."""

    def __init__(self, processor: Processor, out: int, limits: dict[str, int]) -> None:
        self.processor = processor
        self.out = out
        self.lock = threading.Lock()
        self.current: Entry | None = None
        self.retire = False
        self.recycling = Recycling(int(limits.get("jobs", 0)), int(limits.get("memory", 0)),
                                   self._retire)

    def _retire(self, reason: str) -> None:
        self.retire = True

    def run(self, raw: dict[str, Any]) -> None:
        prepared = self.processor.prepare(leased_from_wire(raw))
        ack: Ack
        if isinstance(prepared, Ack):
            ack = prepared
        else:
            with self.lock:
                self.current = prepared
            ack = self.processor.run(prepared)
        self.recycling.job_ended()
        with self.lock:  # after any messages the flusher sent: they belong to this job
            self.current = None
            write_frame(self.out, {"op": "done", "ack": ack_to_wire(ack),
                                   "retire": self.retire})

    def cancel(self) -> None:
        with self.lock:
            if self.current is not None:
                self.current.ctx.request_cancel()

    def flush(self, stop: threading.Event) -> None:
        while not stop.wait(FLUSH_EVERY):
            with self.lock:
                entry = self.current
                if entry is None:
                    continue
                events, progress = entry.ctx.drain()
                if events or progress is not None:
                    write_frame(self.out, {
                        "op": "events", "token": entry.job.token,
                        "events": [e.to_wire() for e in events],
                        "progress": None if progress is None else list(progress)})


def _read(inp: int, runner: _Runner, jobs: queue.SimpleQueue[dict[str, Any] | None]) -> None:
    try:
        while True:
            frame = read_frame(inp)
            if frame is None:
                continue
            if frame["op"] == "run":
                jobs.put(frame["job"])
            elif frame["op"] == "cancel":
                runner.cancel()
            elif frame["op"] == "exit":
                break
    except Closed:
        pass
    jobs.put(None)


def main(argv: list[str]) -> int:
    """Serve the worker on the pipes named by ``argv`` (IN OUT PARENT) until it says stop."""
    inp, out, parent = (int(a) for a in argv[:3])
    for name in _IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    _die_with(parent)
    hello = read_frame(inp)
    if hello is None or hello.get("op") != "hello":
        return 1
    sys.path[:] = list(hello["path"])
    if hello.get("logs"):
        configure_logging(**hello["logs"])
    try:
        app = _import_app(hello["app"])
        processor = Processor(app, hello["worker"], app.clock)
    except BaseException as exc:  # the worker says why, in one line, and runs nothing here
        write_frame(out, {"op": "ready", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    write_frame(out, {"op": "ready"})
    runner = _Runner(processor, out, hello.get("limits") or {})
    jobs: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
    stop = threading.Event()
    threading.Thread(target=_read, args=(inp, runner, jobs), daemon=True,
                     name="conveyor-job-process-reader").start()
    threading.Thread(target=runner.flush, args=(stop,), daemon=True,
                     name="conveyor-job-process-flush").start()
    try:
        while not runner.retire:
            job = jobs.get()
            if job is None:
                break
            runner.run(job)
    except Closed:  # the worker is gone
        return 1
    finally:
        stop.set()
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a process by the worker
    code = main(sys.argv[1:])
    logging.shutdown()
    os._exit(code)  # job threads the job left behind must not keep the process
