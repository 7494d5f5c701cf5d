"""``Storage.release_worker`` on Redis: a supervisor saw one of its worker processes die, so
the jobs that worker holds are recovered now rather than when their leases expire.

``lua/release.lua`` runs per queue, a page of the queue's active jobs per call (walked by
lease expiry, so a big queue never holds Redis for long), and recovers the dead worker's jobs
exactly as ``reclaim.lua`` recovers expired ones (both use ``lua/_recover.lua``).
"""

from __future__ import annotations

from collections.abc import Callable

from conveyor.storage.redis.graph import RedisGraph

__all__ = ["RELEASE_PAGE", "RedisRelease"]

RELEASE_PAGE = 200  # active jobs looked at per release.lua call


class RedisRelease(RedisGraph):
    """The release part of ``Storage`` on one Redis deployment."""

    # Declared, not defined: ``RedisStorage`` defines it (see ``WaitsThenDequeues``).
    unregister_worker: Callable[[str], None]

    def release_worker(self, worker_id: str, max_recoveries: int = 5) -> int:
        """Recover every job ``worker_id`` holds now, and unregister it."""
        total = 0
        for queue in self.known_queues():
            above = "-inf"
            while above:
                done, moves, above = self.scripts.run(
                    "release", self.keys.queue(queue),
                    [self.now_arg(), queue, max_recoveries, worker_id, above, RELEASE_PAGE])
                self.sync_batches(moves)
                self.ring(queue, int(done))
                total += int(done)
        self.unregister_worker(worker_id)
        return total
