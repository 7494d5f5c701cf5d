"""What every test server (PostgreSQL, RabbitMQ) shares: a context manager that cleans up
after a failed start, and the wait for a freshly started process to answer."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

S = TypeVar("S", bound="ManagedServer")


class ManagedServer:
    """``with Server() as s``: ``start()`` on entry (``cleanup()`` if it fails), ``cleanup()``
    on exit. Subclasses define both."""

    def start(self: S) -> S:
        raise NotImplementedError

    def cleanup(self) -> None:
        raise NotImplementedError

    def __enter__(self: S) -> S:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()


def wait_ready(process: subprocess.Popen[bytes] | None, answers: Callable[[], bool],
               timeout: float, what: str, log: str, interval: float = 0.05) -> None:
    """Poll ``answers`` until it is true; fail with ``what`` if the process exits or time runs
    out (``log`` names where to look)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited at start; see {log}")
        if answers():
            return
        time.sleep(interval)
    raise RuntimeError(f"{what} did not answer in {timeout:.0f}s; see {log}")
