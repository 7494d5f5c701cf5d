"""Where jobs run: a fixed pool of threads for sync jobs, one asyncio loop for ``async def``.

Thread jobs cannot be killed in Python. When one runs past its timeout, the watchdog records
it as an error (``JobTimeout``, retried like any other), marks its thread *abandoned* and
starts a replacement thread so the worker keeps its full concurrency. The stuck thread is a
daemon: it finishes (its late result is discarded) or dies with the process. Async jobs are
really cancelled (``asyncio.wait_for``). A ``def`` job whose executor is ``"process"`` is
handed by its pool thread to a job process, which is killed at the deadline
(``worker/job_processes.py``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable

from conveyor.core.job import Ack
from conveyor.worker.inflight import Entry
from conveyor.worker.job_processes import JobProcesses
from conveyor.worker.processor import Processor

__all__ = ["AsyncExecutor", "Finish", "ThreadExecutor"]

log = logging.getLogger("conveyor.worker")

Finish = Callable[[Entry, Ack], None]
#: A queued item that yields the entry its pool thread runs (``ThreadExecutor.hand``).
Task = Callable[[], Entry]


class _Slot:
    """One pool thread and the job it is running now."""

    __slots__ = ("abandoned", "current", "thread")

    def __init__(self) -> None:
        self.current: Entry | None = None
        self.abandoned = False
        self.thread: threading.Thread | None = None


class ThreadExecutor:
    """``size`` daemon threads taking entries from one queue (no thread per job)."""

    def __init__(self, size: int, processor: Processor, finish: Finish,
                 processes: JobProcesses | None = None) -> None:
        self.size = size
        self.processor = processor
        self.finish = finish
        self.processes = processes  # where a thread hands an ``executor="process"`` job
        self._queue: queue.SimpleQueue[Entry | Task | None] = queue.SimpleQueue()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._counter = 0
        self.abandoned = 0

    def start(self) -> None:
        """Start the pool threads."""
        for _ in range(self.size - len(self._slots)):
            self._spawn()

    def _spawn(self) -> None:
        slot = _Slot()
        with self._lock:
            self._counter += 1
            slot.thread = threading.Thread(
                target=self._work, args=(slot,), name=f"conveyor-job-{self._counter}", daemon=True
            )
            self._slots.append(slot)
        slot.thread.start()

    def submit(self, entry: Entry) -> None:
        """Queue an entry; a free pool thread picks it up."""
        self._queue.put(entry)

    def hand(self, entry: Entry, timeout: float) -> None:
        """Queue an entry and return once a pool thread has taken it (or after ``timeout``).

        The fetcher hands the first job of a wake so (``Fetcher.wait_tick``): queued with
        ``submit``, the job waited while the fetcher went on to its next fetch, up to the
        call that let go of the GIL, before its pool thread could start it (0.2 ms of an idle
        Redis worker's 0.47 ms, issue 53). Here the fetcher steps aside until the job is on
        its thread."""
        taken = threading.Event()

        def take() -> Entry:
            taken.set()
            return entry

        self._queue.put(take)
        taken.wait(timeout)

    def _work(self, slot: _Slot) -> None:
        run, finish, get = self.processor.run, self.finish, self._queue.get
        processes = self.processes
        while True:
            item = get()
            if item is None:
                return
            entry = item if isinstance(item, Entry) else item()
            slot.current = entry
            if entry.executor == "process" and processes is not None:
                ack = processes.run(entry)  # it kills the job's process at its deadline
            else:
                ack = run(entry)
            slot.current = None
            finish(entry, ack)  # a no-op when the watchdog already claimed the entry
            if slot.abandoned:
                log.warning("abandoned thread %s finished job %s after its timeout; exiting",
                            threading.current_thread().name, entry.job.id)
                return

    def reap(self, now: float) -> list[Entry]:
        """Abandon the threads whose job is past its deadline; return those entries.

        A replacement thread is started for each, so the pool keeps ``size`` live threads.
        """
        overdue: list[Entry] = []
        with self._lock:
            slots = list(self._slots)
        for slot in slots:
            entry = slot.current
            if entry is None or slot.abandoned or entry.deadline is None or now < entry.deadline:
                continue
            if entry.executor == "process" and self.processes is not None:
                continue  # its thread waits for a job process it kills at the deadline
            slot.abandoned = True
            with self._lock:
                self._slots.remove(slot)
            self.abandoned += 1
            overdue.append(entry)
            log.error(
                "job %s (%s) ran past its timeout; thread %s is abandoned (Python cannot kill "
                "a thread) and a replacement started", entry.job.id, entry.job.name,
                slot.thread.name if slot.thread else "?",
            )
            self._spawn()
        return overdue

    def stop(self, timeout: float = 1.0) -> None:
        """Ask idle threads to exit; busy ones are daemons and do not hold the process."""
        with self._lock:
            slots = list(self._slots)
            self._slots.clear()
        for _ in slots:
            self._queue.put(None)
        for slot in slots:
            if slot.thread is not None and slot.current is None:
                slot.thread.join(timeout)


class AsyncExecutor:
    """One asyncio event loop on its own thread, started on the first async job.

    A job submitted from another thread (the fetcher's) crosses into the loop with
    ``call_soon_threadsafe``, which writes to the loop's wake-up pipe for the loop to read:
    per job, that was the largest cost a short async job paid over a raw asyncio queue. So the
    crossings are shared: jobs submitted while one is on its way (a fetch's page, dispatched
    in a loop) wait in ``_pending`` and ride with it, in order. A job submitted on the loop's
    own thread (one from the reserve, started by the job that ended: ``Launcher.finish``)
    becomes a task at once, after any still pending, with no crossing at all.
    """

    def __init__(self, processor: Processor, finish: Finish) -> None:
        self.processor = processor
        self.finish = finish
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: deque[Entry] = deque()  # submitted, their crossing on its way
        self._pending_lock = threading.Lock()
        self._crossing = False  # a ``_take_pending`` is scheduled on the loop
        # Which loop the pending jobs are for: a stop starts the next one, so a crossing the
        # stopped loop runs late (it was blocked past the stop's join) takes nothing of it.
        self._generation = 0
        #: Crossings into the loop from other threads so far (for tests and probes).
        self.crossings = 0

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None:  # the per-job path takes no lock
            return loop
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                self._thread = threading.Thread(
                    target=self._serve, args=(loop, ready), name="conveyor-asyncio", daemon=True
                )
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def submit(self, entry: Entry) -> None:
        """Start the job as a task on the loop (jobs start in the order submitted)."""
        loop = self._ensure_loop()
        if self._thread is threading.current_thread():
            if self._pending:
                self._take_pending(self._generation)
            self._spawn(entry)
            return
        with self._pending_lock:
            self._pending.append(entry)
            if self._crossing:
                return  # it rides with the crossing on its way
            self._crossing = True
            self.crossings += 1
            generation = self._generation
        loop.call_soon_threadsafe(self._take_pending, generation)

    def _take_pending(self, generation: int) -> None:
        with self._pending_lock:
            if generation != self._generation:
                return  # a stopped loop's crossing: the pending jobs are the next loop's
            entries = list(self._pending)
            self._pending.clear()
            self._crossing = False
        for entry in entries:
            self._spawn(entry)

    def _spawn(self, entry: Entry) -> None:
        task = asyncio.get_running_loop().create_task(self._run(entry))
        entry.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, entry: Entry) -> None:
        try:
            ack = await self.processor.run_async(entry)
        except asyncio.CancelledError:
            return  # shutdown: the launcher acknowledges the job as interrupted
        self.finish(entry, ack)

    def stop(self, timeout: float = 1.0) -> None:
        """Cancel what still runs and stop the loop."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        with self._pending_lock:  # a loop started later takes nothing of this one's
            self._pending.clear()
            self._crossing = False
            self._generation += 1

        def _cancel_all() -> None:
            for task in list(self._tasks):
                task.cancel()
            loop.call_soon(loop.stop)

        loop.call_soon_threadsafe(_cancel_all)
        if self._thread is not None:
            self._thread.join(timeout)
