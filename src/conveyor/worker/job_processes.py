"""The process executor: ``def`` jobs run in job processes the worker can kill at a job's
timeout (``--executor process``, or ``@app.job(executor="process")``; docs/worker.md,
"Executors").

A thread can never be stopped in Python, so a thread job past its timeout is only abandoned
(``worker/executors.py``): it keeps running, and holding what it holds, until it returns or
the process ends. A job process can be killed. Each pool thread that gets a process job hands
it to an idle job process (or starts one: ``python -m conveyor.worker.job_process``, which
imports the app itself) and waits for its answer, polling: at the job's deadline it kills
the process and ends the job as the timeout rule says (a ``JobTimeout`` error, retried like
any other); when the worker asks for a cancellation it tells the process; messages and
progress the job sends are added to its context, which the watchdog writes live. Processes
are reused between jobs, at most one per pool thread, and replaced when killed, when they
die, or when a recycling limit says so (``worker/recycling.py``).

Everything crosses as JSON (``worker/frames.py``): the leased job's fields one way, the
``Ack`` the other. A job process that dies while running a job (a segfault in a C extension,
``os._exit``, the kernel's OOM killer) ends that job with an error attempt, as an exception
would, and harms no other job: no worker crash, no recovery of the jobs beside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conveyor.core.clock import Clock
from conveyor.core.job import Ack
from conveyor.errors import ConveyorError
from conveyor.worker.frames import (
    Closed,
    ack_from_wire,
    event_from_wire,
    leased_to_wire,
    read_frame,
    write_frame,
)
from conveyor.worker.inflight import Entry
from conveyor.worker.logs import logging_settings
from conveyor.worker.processor import Processor

__all__ = ["JobProcessDied", "JobProcesses", "app_spec"]

log = logging.getLogger("conveyor.worker")

POLL = 0.1  # seconds between two looks at a running job's deadline and cancellation
START_TIMEOUT = 120.0  # seconds a new job process may take to import the app


class JobProcessDied(ConveyorError):
    """The job process running a job ended before the job did (or could not start)."""


def app_spec(app: object, given: str = "") -> str:
    """The app as ``module:attribute`` for job processes to import: ``given``, else the
    first imported module that holds it under a name (``ConveyorError`` if none does)."""
    if given:
        return given
    for name, module in list(sys.modules.items()):
        if module is None or name == "__main__":
            continue
        for attribute, value in list(vars(module).items()):
            if value is app:
                return f"{name}:{attribute}"
    raise ConveyorError("the process executor needs the app as module:attribute: run it with "
                        "`conveyor worker module:app`, or give WorkerConfig(app=...)")


class _JobProcess:
    """One job process and the two pipes to it.

    Started (``Popen``) on the worker's one spawning thread, which lives as long as the
    worker process: Linux sends ``PR_SET_PDEATHSIG`` when the *thread* that started a process
    ends, and a pool thread may end while the worker lives (abandoned past a thread job's
    timeout), which would kill a job process another thread is using."""

    def __init__(self, spawner: ThreadPoolExecutor) -> None:
        self.popen, self.tx, self.rx = spawner.submit(_spawn).result()
        self.fds: tuple[int, ...] = (self.tx, self.rx)

    def handshake(self, hello: dict[str, Any]) -> None:
        """Send ``hello`` and wait until the process imported the app (``JobProcessDied``
        when it could not)."""
        try:
            write_frame(self.tx, hello)
            ready = read_frame(self.rx, START_TIMEOUT)
        except Closed:
            ready = {"error": f"it ended at start ({self.ended()})"}
        if ready is None or ready.get("error"):
            self.kill()
            why = "it did not answer" if ready is None else ready["error"]
            raise JobProcessDied(f"could not start a job process: {why}")

    def ended(self) -> str:
        """How the process ended (it has, or is killed now)."""
        code = self.popen.poll()
        if code is None:
            return "still running"
        return f"signal {-code}" if code < 0 else f"exit code {code}"

    def kill(self) -> None:
        """Kill the process now (if it still runs) and close its pipes, once: a descriptor
        closed twice could close another thread's that reused its number."""
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        self.popen.wait()
        fds, self.fds = self.fds, ()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _spawn() -> tuple[subprocess.Popen[bytes], int, int]:
    """Start a job process; its Popen, and the ends of its pipes the worker keeps."""
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    try:
        popen = subprocess.Popen(
            [sys.executable, "-m", "conveyor.worker.job_process", str(down_r), str(up_w),
             str(os.getpid())], pass_fds=(down_r, up_w))
    except BaseException:
        os.close(down_w)
        os.close(up_r)
        raise
    finally:
        os.close(down_r)
        os.close(up_w)
    return popen, down_w, up_r


class JobProcesses:
    """The job processes of one worker process; ``run`` is called by pool threads."""

    def __init__(self, processor: Processor, clock: Clock, hello: dict[str, Any],
                 app: object = None) -> None:
        self.processor = processor
        self.clock = clock
        self.hello = {"op": "hello", **hello}
        self.app = app  # looked for among the modules when ``hello`` names no app
        self._idle: list[_JobProcess] = []
        self._busy: set[_JobProcess] = set()
        self._lock = threading.Lock()
        self._closing = False
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="conveyor-job-process-start")
        self.started = 0  # job processes started, for the log and the tests
        self.killed = 0  # job processes killed at a job's timeout

    def run(self, entry: Entry) -> Ack:
        """Run ``entry`` in a job process; its ``Ack``, whatever happens to the process."""
        asked = self.clock.now()
        try:
            proc = self._handed(entry)
        except JobProcessDied as exc:
            log.error("job %s: %s", entry.job.id, exc)
            return self.processor.failure(entry, exc)
        waited = max(0.0, self.clock.now() - asked)  # starting a process is not the job's
        entry.started += waited
        if entry.deadline is not None:
            entry.deadline += waited
        keep = False
        try:
            ack, keep = self._run(proc, entry)
        except Exception as exc:  # a garbled frame: this job's error, the pool thread lives
            log.exception("job %s: talking to its job process failed", entry.job.id)
            ack = self.processor.failure(entry, exc)
        finally:
            self._give_back(proc, keep)
        events, progress = entry.ctx.drain()  # what arrived but was not written live yet
        if events or progress is not None:
            ack = dataclasses.replace(ack, events=(*events, *ack.events),
                                      progress=ack.progress or progress)
        return ack

    def _handed(self, entry: Entry) -> _JobProcess:
        """A job process that took ``entry``: an idle one died since it was last used (its
        pipe is closed when the job is sent) gives way to another, for the job never began."""
        for _ in range(3):
            proc = self._take()
            try:
                write_frame(proc.tx, {"op": "run", "job": leased_to_wire(entry.job)})
            except Closed:
                self._give_back(proc, False)
                continue
            return proc
        raise JobProcessDied("could not hand the job to a job process: each one ended")

    def _run(self, proc: _JobProcess, entry: Entry) -> tuple[Ack, bool]:
        cancelled = False
        try:
            while True:
                wait = POLL
                if entry.deadline is not None:
                    left = entry.deadline - self.clock.now()
                    if left <= 0:
                        return self._timed_out(proc, entry), False
                    wait = min(wait, left)
                frame = read_frame(proc.rx, wait)
                if frame is None:
                    if entry.ctx.cancelled and not cancelled:
                        write_frame(proc.tx, {"op": "cancel"})
                        cancelled = True
                elif frame["op"] == "events" and frame.get("token") == entry.job.token:
                    progress = frame.get("progress")
                    entry.ctx.merge([event_from_wire(e) for e in frame["events"]],
                                    None if progress is None else (progress[0], progress[1]))
                elif frame["op"] == "done":
                    return ack_from_wire(frame["ack"]), not frame.get("retire")
        except Closed:
            proc.kill()
            if self._closing:
                return self.processor.interrupted(entry), False
            died = JobProcessDied(f"the job process running job {entry.job.name} ended "
                                  f"({proc.ended()}) before the job did")
            return self.processor.failure(entry, died), False

    def _timed_out(self, proc: _JobProcess, entry: Entry) -> Ack:
        proc.kill()
        self.killed += 1
        log.error("job %s (%s) ran past its timeout; its job process (pid %d) was killed",
                  entry.job.id, entry.job.name, proc.popen.pid)
        return self.processor.timed_out(entry)

    def _take(self) -> _JobProcess:
        with self._lock:
            if self._closing:
                raise JobProcessDied("the worker is stopping")
            while self._idle:
                proc = self._idle.pop()
                if proc.popen.poll() is None:
                    self._busy.add(proc)
                    return proc
                proc.kill()  # died while idle (the OOM killer, an operator): never used
        try:
            spec = app_spec(self.app, self.hello.get("app", ""))
        except ConveyorError as exc:
            raise JobProcessDied(str(exc)) from None
        hello = {**self.hello, "app": spec, "path": list(sys.path), "logs": logging_settings()}
        try:
            proc = _JobProcess(self._spawner)  # outside the lock: starting one takes a while
        except (RuntimeError, OSError) as exc:  # stopping, or no process could be made
            raise JobProcessDied(f"could not start a job process: {exc}") from None
        proc.handshake(hello)
        with self._lock:
            self.started += 1
            self._busy.add(proc)
            closing = self._closing
        if closing:
            self._give_back(proc, False)
            raise JobProcessDied("the worker is stopping")
        log.debug("started job process %d", proc.popen.pid)
        return proc

    def _give_back(self, proc: _JobProcess, keep: bool) -> None:
        with self._lock:
            self._busy.discard(proc)
            if keep and not self._closing and proc.popen.poll() is None:
                self._idle.append(proc)
                return
        self._stop(proc)

    @staticmethod
    def _stop(proc: _JobProcess) -> None:
        if proc.fds and proc.popen.poll() is None:
            with contextlib.suppress(Closed):
                write_frame(proc.tx, {"op": "exit"})
            try:
                proc.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("job process %d did not exit when asked; killing it",
                            proc.popen.pid)
        proc.kill()

    def close(self) -> None:
        """Stop every job process: idle ones are asked to exit, busy ones (a hard shutdown
        already put their jobs back) are killed."""
        with self._lock:
            self._closing = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for proc in busy:  # its pool thread sees the pipe end, and cleans up
            with contextlib.suppress(ProcessLookupError):
                proc.popen.kill()
        for proc in busy:  # reaped before the worker's stop returns, not when its thread runs
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
        for proc in idle:
            self._stop(proc)
        self._spawner.shutdown(wait=False)
