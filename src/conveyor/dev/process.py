"""What every server started for development or tests shares: a context manager that cleans
up after a failed start, the wait for a freshly started process to answer, a free port, and
dropping root to ``nobody`` (RabbitMQ and PostgreSQL refuse to run as root; CI containers
are root)."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

__all__ = ["ManagedServer", "demote", "free_port", "listening", "log_tail", "wait_ready"]

S = TypeVar("S", bound="ManagedServer")


class ManagedServer(ABC):
    """``with Server() as s``: ``start()`` on entry (``cleanup()`` if it fails), ``cleanup()``
    on exit. Subclasses define both."""

    @abstractmethod
    def start(self: S) -> S:
        """Start the server; returns it."""

    @abstractmethod
    def cleanup(self) -> None:
        """Stop the server and remove what it left."""

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
            raise RuntimeError(f"{what} exited at start; {log_tail(log)}")
        if answers():
            return
        time.sleep(interval)
    raise RuntimeError(f"{what} did not answer in {timeout:.0f}s; {log_tail(log)}")


def log_tail(log: str, lines: int = 12) -> str:
    """The end of a server's log, quoted into its start error: the log's folder is removed
    when the failed start is cleaned up, so "see <path>" alone leaves nothing to read."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return f"no log at {log}"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return f"the end of {log}:\n" + "\n".join(tail) if tail else f"{log} is empty"


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def demote() -> tuple[Callable[[], None] | None, int | None, int | None]:
    """(preexec function, uid, gid) that drop root to ``nobody``; Nones when not root."""
    if os.geteuid() != 0:
        return None, None, None
    entry = pwd.getpwnam("nobody")
    uid, gid = entry.pw_uid, entry.pw_gid

    def preexec() -> None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    return preexec, uid, gid
