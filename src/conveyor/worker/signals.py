"""Signals through a self-pipe: handlers do no work, the main loop reads signal numbers.

``signal.set_wakeup_fd`` makes the interpreter write each signal's number to a pipe as soon
as it arrives; the Python-level handler is a no-op. The launcher's (or supervisor's) main loop
blocks in ``select`` on the pipe and acts there, outside any handler, so no lock taken in a
handler can deadlock [sidekiq's self-pipe].

| signal      | meaning                                                         |
|-------------|-----------------------------------------------------------------|
| TSTP, USR1  | quiet: stop fetching, finish in-flight jobs                     |
| TERM, INT   | stop: quiet, wait ``--timeout``, then hard shutdown; twice: now |
| TTIN        | dump every thread's stack to the log                            |
| USR2        | reopen log files (after logrotate)                              |
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
import traceback
from collections.abc import Iterable
from types import FrameType

__all__ = ["HANDLED", "WAKE", "SignalPipe", "dump_stacks"]

log = logging.getLogger("conveyor.worker")

HANDLED: tuple[signal.Signals, ...] = (
    signal.SIGTERM, signal.SIGINT, signal.SIGTSTP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGTTIN,
)
WAKE = 0  # written by ``wake()``: not a signal, just "look at your flags"


def _noop(signum: int, frame: FrameType | None) -> None:
    """The handler: the wakeup fd already carries the signal to the main loop."""


class SignalPipe:
    """Installs no-op handlers plus a wakeup fd; ``wait()`` returns the signals received."""

    def __init__(self, signals: Iterable[signal.Signals] = HANDLED) -> None:
        self.signals = tuple(signals)
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous: dict[int, object] = {}
        self._old_fd = -1

    def install(self) -> SignalPipe:
        """Take over the signals; must run in the main thread."""
        self._old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, _noop)
        return self

    def restore(self) -> None:
        """Give the signals back to their previous handlers and close the pipe."""
        for sig, handler in self._previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(self._old_fd if self._old_fd >= 0 else -1)
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def wake(self) -> None:
        """Wake ``wait()`` from another thread (e.g. a remote ``stop`` command)."""
        with contextlib.suppress(OSError):
            os.write(self._write, bytes([WAKE]))

    def wait(self, timeout: float | None) -> list[int]:
        """Block until a signal or ``wake()`` or ``timeout``; return the numbers read."""
        try:
            ready, _, _ = select.select([self._read], [], [], timeout)
        except InterruptedError:  # pragma: no cover - PEP 475 retries select itself
            ready = [self._read]
        if not ready:
            return []
        try:
            data = os.read(self._read, 512)
        except BlockingIOError:
            return []
        return list(data)


def dump_stacks() -> str:
    """Every thread's current stack, as text (for TTIN)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        parts.append(f"--- thread {names.get(ident, '?')} ({ident}) ---\n{stack}")
    return "\n".join(parts)


def log_stacks() -> None:
    """Write every thread's stack to the log at WARNING, so it shows with default levels."""
    log.warning("thread dump (pid %d):\n%s", os.getpid(), dump_stacks())
