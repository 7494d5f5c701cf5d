"""Supervisor: forks N worker processes, forwards signals, restarts children that die, and
hands a dead child's jobs back at once.

Used by ``conveyor worker`` (one child per core by default, or ``--processes N``). The parent
holds no storage connection and no threads (the app opens its storage lazily, in each child
after the fork), so a restarted child never inherits one. A child that dies unexpectedly
(crash, OOM kill, ``kill -9``) is restarted after a backoff that doubles while it keeps dying
young, so a crash loop does not spin. A child that retired at a recycling limit
(``--max-jobs-per-child``, ``--max-memory-per-child``: worker/recycling.py) exits with
``RECYCLE_EXIT`` having ended or handed back every job it took: it is replaced at once, with
no backoff and nothing to release. After TERM/INT the supervisor waits for every child's own
graceful stop, and exits when all are gone.

**Release.** The supervisor chooses each child's worker id before the fork, so when ``waitpid``
says a child died without a clean stop (any exit but 0) it knows whose leases are orphaned and
does not wait for them to expire: a short-lived helper, forked for that one job, opens the
storage, calls ``release`` (``Storage.release_worker``) and exits. The helper, not the parent,
holds that connection, so the parent still has none when it forks the replacement child, and a
storage outage can never stall the supervisor's loop (signals, restarts). Fencing is the
storage's: the release makes every lease token the child held invalid, so nothing it sent
before dying can land afterwards. Leases remain the recovery for machines that die whole.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from conveyor.core.ids import new_id
from conveyor.worker.config import make_worker_id
from conveyor.worker.logs import reopen_logs
from conveyor.worker.recycling import RECYCLE_EXIT
from conveyor.worker.signals import HANDLED, SignalPipe

__all__ = ["Supervisor"]

log = logging.getLogger("conveyor.worker")

_FORWARD = frozenset(HANDLED)
_STOP = frozenset({signal.SIGTERM, signal.SIGINT})
_YOUNG = 10.0  # a child that dies sooner than this counts as a crash loop
_MAX_BACKOFF = 30.0
_RELEASE_DEADLINE = 60  # seconds a release helper may take before SIGALRM ends it


@dataclass(slots=True)
class _Child:
    slot: int
    pid: int = 0
    worker_id: str = ""
    started: float = 0.0
    crashes: int = 0
    restart_at: float | None = None


class Supervisor:
    """Runs ``target`` (a worker process body given its worker id, returning an exit code) in
    N forked children; ``release(worker_id)`` hands back the jobs of a child that died."""

    def __init__(self, processes: int, target: Callable[[str], int], *,
                 shutdown_timeout: float = 25.0,
                 release: Callable[[str], int] | None = None) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.processes = processes
        self.target = target
        self.release = release
        self.shutdown_timeout = shutdown_timeout
        self.children = [_Child(slot) for slot in range(processes)]
        self.releasers: dict[int, str] = {}  # helper pid -> the dead child's worker id
        self.stopping = False
        self._kill_at: float | None = None
        self._pipe: SignalPipe | None = None
        self.restarts = 0  # after a crash
        self.recycled = 0  # processes that retired at a recycling limit and were replaced

    def run(self) -> int:
        """Fork the children and supervise them until they have all stopped after a TERM."""
        self._pipe = SignalPipe((*HANDLED, signal.SIGCHLD)).install()
        try:
            log.info("supervisor pid=%d starting %d worker processes", os.getpid(), self.processes)
            for child in self.children:
                self._spawn(child)
            while (self._alive() or self.releasers
                   or (not self.stopping and self._pending_restart())):
                for signum in self._pipe.wait(self._wait_time()):
                    self._on_signal(signum)
                self._reap()
                self._restart_due()
                self._kill_stragglers()
        finally:
            self._pipe.restore()
            self._pipe = None
        log.info("supervisor stopped (%d restarts, %d recycled)", self.restarts, self.recycled)
        return 0

    def _alive(self) -> list[_Child]:
        return [c for c in self.children if c.pid]

    def _pending_restart(self) -> bool:
        return any(c.restart_at is not None for c in self.children)

    def _wait_time(self) -> float:
        due = [c.restart_at for c in self.children if c.restart_at is not None]
        return max(0.0, min([*due, time.monotonic() + 1.0]) - time.monotonic())

    def _spawn(self, child: _Child) -> None:
        # The worker id is chosen here, so the parent knows it; the child's pid completes it.
        tag = new_id()[-6:]
        pid = self._fork(lambda: self.target(make_worker_id(os.getpid(), tag)),
                         "worker process crashed")
        child.pid, child.started, child.restart_at = pid, time.monotonic(), None
        child.worker_id = make_worker_id(pid, tag)
        log.info("started worker process %d (slot %d)", pid, child.slot)

    def _fork(self, body: Callable[[], int], crashed: str) -> int:
        """Fork a process that runs ``body`` and exits with its code; returns its pid."""
        pid = os.fork()
        if pid == 0:  # the child: never returns into the supervisor's loop
            code = 1
            try:
                if self._pipe is not None:
                    self._pipe.restore()
                code = body()
            except BaseException:
                log.exception(crashed)
            finally:
                logging.shutdown()
                os._exit(code)
        return pid

    def _release(self, child: _Child) -> None:
        """Hand back the dead child's jobs now, from a helper process (see the module doc)."""
        release, worker_id = self.release, child.worker_id
        if release is None or not worker_id:
            return

        def body() -> int:
            signal.alarm(_RELEASE_DEADLINE)  # a storage that never answers must not keep it
            released = release(worker_id)
            if released:
                log.warning("worker %s died: %d job(s) it held put back at once",
                            worker_id, released)
            return 0

        self.releasers[self._fork(body, f"could not release the jobs of worker {worker_id}; "
                                        "they run again when their leases expire")] = worker_id

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGUSR2:
            reopen_logs()  # the supervisor's own lines go to the same file
        if signum in _FORWARD:
            for child in self._alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)
        if signum in _STOP and not self.stopping:
            log.info("received %s: stopping %d worker processes",
                     signal.Signals(signum).name, len(self._alive()))
            self.stopping = True
            self._kill_at = time.monotonic() + self.shutdown_timeout + 15.0
            for child in self.children:
                child.restart_at = None

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.releasers.pop(pid, None) is not None:
                continue
            child = next((c for c in self.children if c.pid == pid), None)
            if child is not None:
                self._exited(child, status)

    def _exited(self, child: _Child, status: int) -> None:
        child.pid = 0
        code = os.waitstatus_to_exitcode(status)
        if code == RECYCLE_EXIT:  # retired cleanly (worker/recycling.py): a new one, now
            child.crashes = 0
            child.restart_at = None if self.stopping else time.monotonic()
            self.recycled += 1
            log.info("worker process (slot %d) recycled after %.1fs%s", child.slot,
                     time.monotonic() - child.started,
                     "" if self.stopping else "; starting its replacement")
            return
        if code != 0:  # no clean stop: whatever it held is orphaned (0 = handed back)
            self._release(child)
        if self.stopping or code == 0:
            log.info("worker process (slot %d) exited with %d", child.slot, code)
            return
        lived = time.monotonic() - child.started
        child.crashes = child.crashes + 1 if lived < _YOUNG else 1
        delay = min(_MAX_BACKOFF, 0.5 * 2 ** (child.crashes - 1))
        child.restart_at = time.monotonic() + delay
        how = f"signal {-code}" if code < 0 else f"code {code}"
        log.error("worker process (slot %d) died with %s after %.1fs; restarting in %.1fs",
                  child.slot, how, lived, delay)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None and child.restart_at <= now and not self.stopping:
                if child.crashes:  # a recycled process is replaced, not restarted
                    self.restarts += 1
                self._spawn(child)

    def _kill_stragglers(self) -> None:
        # A child is itself bounded by its shutdown timeout; this only catches a wedged one.
        if self._kill_at is None or time.monotonic() < self._kill_at:
            return
        for child in self._alive():
            log.error("worker process %d did not stop in time; killing it", child.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        self._kill_at = None
