"""CPU seconds of a process tree, read from ``/proc``: how the probes charge a server's work
(PostgreSQL's backends, a RabbitMQ node's schedulers) to the jobs they drained."""

from __future__ import annotations

import os

__all__ = ["tree_cpu"]

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and every process below it still running."""
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total
