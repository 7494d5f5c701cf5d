"""Recycling: a process that ran enough jobs, or grew too big, is replaced by a fresh one.

``--max-jobs-per-child N`` and ``--max-memory-per-child MiB`` (Celery's
``worker_max_tasks_per_child`` and ``worker_max_memory_per_child``) apply to the process that
runs a job's code: the worker process for jobs run in its threads or on its event loop, a job
process for ``executor="process"`` jobs (``worker/job_processes.py``). After each job it ran,
the process counts it and reads its resident memory (the current RSS, ``/proc/self/statm``;
the peak RSS where there is no ``/proc``): a job that takes the process past a limit still
ends normally, and the process is replaced afterwards (Celery's rule too).

A worker process that reaches a limit *retires*: it stops taking jobs (quiet), hands its
reserve back unrun, lets every running job end, however long it takes (its timeout still
applies), writes their outcomes and exits with ``RECYCLE_EXIT``; its supervisor starts a new
one at once, without the backoff of a crash and without releasing leases (there are none
left). Nothing is lost and nothing runs twice: every job it took either ended there or was
handed back before it started.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
from collections.abc import Callable

__all__ = ["RECYCLE_EXIT", "Recycling", "resident_mib"]

log = logging.getLogger("conveyor.worker")

#: The exit code of a worker process that retired after reaching a limit (EX_TEMPFAIL): its
#: supervisor replaces it at once, as a recycled process, not a crashed one.
RECYCLE_EXIT = 75
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_mib() -> float:
    """This process's resident memory in MiB: now (``/proc/self/statm``), else its peak."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE / (1 << 20)
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB; bytes on macOS
        return float(peak) / ((1 << 20) if sys.platform == "darwin" else 1024)


class Recycling:
    """Counts the jobs one process ran and checks its memory after each; calls ``retire``
    once, with the reason, when a limit is reached (0 = no limit)."""

    def __init__(self, max_jobs: int, max_mib: int, retire: Callable[[str], None]) -> None:
        self.max_jobs = max_jobs
        self.max_mib = max_mib
        self.retire = retire
        self.jobs = 0
        self.reason = ""
        self._lock = threading.Lock()

    @property
    def limited(self) -> bool:
        """Whether any limit is set."""
        return bool(self.max_jobs or self.max_mib)

    def job_ended(self) -> None:
        """Count a job this process ran, then check the limits (after the job, never
        during it)."""
        if not self.limited:
            return
        with self._lock:
            self.jobs += 1
            if self.reason:
                return
            reason = self.over()
            if not reason:
                return
            self.reason = reason
        log.info("recycling this process: %s", reason)
        self.retire(reason)

    def over(self) -> str:
        """Why this process must be replaced now, or ''."""
        if self.max_jobs and self.jobs >= self.max_jobs:
            return f"it ran {self.jobs} jobs (--max-jobs-per-child {self.max_jobs})"
        if self.max_mib:
            used = resident_mib()
            if used > self.max_mib:
                return (f"its resident memory is {used:.0f} MiB (--max-memory-per-child "
                        f"{self.max_mib})")
        return ""
