"""Jobs the process executor tests run in job processes, which import this module by name.

The app's store comes from ``CONVEYOR_URL`` (a job process inherits the test's environment),
so a job that enqueues reaches the test's store. Every job but ``in_thread`` runs in a job
process (``executor="process"``).
"""

from __future__ import annotations

import ctypes
import os
import socket
import time
from typing import Any

from conveyor import Conveyor, Fail, Retry, current_job

app = Conveyor()
_kept: list[bytearray] = []  # what ``hog`` allocated: kept, as a leak keeps it


@app.job(name="proc.hang_in_c", executor="process", timeout=1.0, retry=1)
def hang_in_c() -> None:
    """Sleeps a minute inside a C call, where no Python code runs and no signal handler can
    raise: only killing its process ends it."""
    ctypes.CDLL(None).sleep(60)


@app.job(name="proc.hang_on_socket", executor="process", timeout=1.0, retry=1)
def hang_on_socket() -> None:
    """Waits for a byte that never comes on a socket without a timeout."""
    left, right = socket.socketpair()
    try:
        left.recv(1)
    finally:
        left.close()
        right.close()


@app.job(name="proc.report", executor="process")
def report(steps: int, *, label: str) -> dict[str, Any]:
    """Writes messages and progress, and returns what it knows about itself."""
    ctx = current_job()
    for step in range(steps):
        ctx.log(f"{label} step {step}", step=step)
        ctx.progress(step + 1, steps)
    return {"pid": os.getpid(), "job_id": ctx.job_id, "attempt": ctx.attempt,
            "label": label, "meta": ctx.meta, "worker": ctx.worker_id}


@app.job(name="proc.fail", executor="process")
def fail() -> None:
    """Ends failed (a business rule)."""
    raise Fail("no such seller")


@app.job(name="proc.boom", executor="process", retry=3)
def boom() -> None:
    """An error: retried."""
    raise ValueError("boom in a job process")


@app.job(name="proc.retry_later", executor="process")
def retry_later() -> None:
    """Asks for a retry in 300 s."""
    raise Retry("not yet", in_seconds=300)


@app.job(name="proc.until_cancelled", executor="process")
def until_cancelled() -> str:
    """Runs until its cancellation reaches it."""
    ctx = current_job()
    ctx.log("started", pid=os.getpid())
    for _ in range(6000):
        if ctx.cancelled:
            return "stopped"
        time.sleep(0.01)
    return "never cancelled"


@app.job(name="proc.die", executor="process", retry=2)
def die() -> None:
    """Kills its own process, as a crash in a C extension would."""
    os._exit(3)


@app.job(name="proc.hog", executor="process")
def hog(mib: int) -> int:
    """Allocates ``mib`` MiB and keeps it (a leak); returns its pid."""
    block = bytearray(mib << 20)
    for i in range(0, len(block), 4096):  # touch every page: resident, not just reserved
        block[i] = 1
    _kept.append(block)
    return os.getpid()


@app.job(name="proc.pid", executor="process")
def pid() -> int:
    """Returns the pid of the process that ran it."""
    return os.getpid()


@app.job(name="proc.follow_up", executor="process")
def follow_up() -> str:
    """Enqueues another job from its job process, through its own store connection."""
    ref = in_thread.enqueue()
    assert ref is not None
    return ref.id


@app.job(name="proc.in_thread", executor="thread")
def in_thread() -> int:
    """Runs in the worker's thread pool whatever the worker's --executor."""
    return os.getpid()


@app.job(name="proc.overrun_in_thread", executor="thread", timeout=0.3, retry=0)
def overrun_in_thread() -> None:
    """Runs past its timeout in a pool thread, which is abandoned and exits when it returns."""
    time.sleep(1.5)


@app.job(name="proc.durable", executor="process")
def durable(order: int) -> int:
    """A durable job in a job process: a step recorded through that process's own store
    connection, then a sleep that hands the job back to the store (docs/durable.md)."""
    ctx = current_job()
    pid_then = ctx.step("pid", os.getpid)
    ctx.sleep(3600)
    return int(pid_then)
