"""Acker: collects finished jobs' ``Ack``s and writes them to storage in batches.

One storage call per batch is what makes high throughput possible (DESIGN §4). The acker
flushes as soon as it has something and the previous flush is done ("group commit"): under
load batches grow by themselves, when idle a single ack is written at once, so latency stays
low. Acks that fail to write (storage outage) are kept and retried; their leases stay in the
heartbeat until they are written, so nothing is recovered twice meanwhile.

Acks ride with the fetcher's next lease when one comes at once (``take``, then ``carried``;
``Storage.dequeue(acks=)``: one round trip for both): while the fetcher is not in a blocking
wait (``carrier``), the acker holds a batch up to ``ack_hold`` for it, then writes it
itself, so an idle worker's or a long job's neighbour's ack is never held longer. Acks the
fetcher took are in ``leases`` until stored; a lease call that failed gives them back
(``restore``), to be written here as any batch is. A worker killed meanwhile leaves them
unsent, as it leaves the acker's own: the jobs are recovered.

A batch the storage refuses for any other reason holds an outcome it cannot store (one no rule
above the storage caught). Retrying it whole would hold up every later ack behind it, so it is
written apart, in halves, down to the ack at fault, which is replaced by a bare ``dead``
outcome "could not store outcome: <why>"; every other ack of the batch is written as it was.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from conveyor.core.clock import Clock
from conveyor.core.job import Ack, ErrorInfo, Outcome
from conveyor.core.text import printable
from conveyor.errors import BrokerUnavailable, StorageUnavailable
from conveyor.storage.base import Storage
from conveyor.worker.config import WorkerConfig

__all__ = ["Acker"]

log = logging.getLogger("conveyor.worker")

_RETRY_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)
# What an outage looks like: backends raise StorageUnavailable, and OSError covers the builtin
# ConnectionError/TimeoutError. Acks are then kept and retried whole, never split.
_OUTAGES = (StorageUnavailable, OSError)


class Acker:
    """Batches ``Ack``s; ``tick()`` writes one batch, ``start()`` runs a flushing thread."""

    name = "acker"

    def __init__(self, storage: Storage, clock: Clock, config: WorkerConfig) -> None:
        self.storage = storage
        self.clock = clock
        self.config = config
        self._pending: list[Ack] = []
        self._writing: list[Ack] = []
        self._carrying: list[Ack] = []  # taken by the fetcher, on their way with a lease
        self._carrier = False  # a lease that can carry acks is about to be asked for
        self._cond = threading.Condition(threading.Lock())
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failures = 0
        self.refused = 0  # acks the storage refused: the lease had moved on (fencing)
        self.written = 0
        #: Called with the job ids of every batch written (the broker feed settles their
        #: deliveries: the store has the outcome, whether it applied or refused it).
        self.on_written: Callable[[list[str]], None] | None = None

    def add(self, ack: Ack) -> None:
        """Queue an ack (with the acks it bundles) for the next batch."""
        with self._cond:
            first = not self._pending
            self._pending.extend(ack.flatten())
            if first:
                self._cond.notify()

    def leases(self) -> dict[str, str]:
        """Job id → token of acks not yet written: their leases must still be extended."""
        with self._cond:
            return {a.job_id: a.token
                    for a in (*self._writing, *self._carrying, *self._pending)}

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._writing) + len(self._carrying)

    def carrier(self, ready: bool) -> None:
        """The fetcher says whether its next lease comes at once (True) or it is about to
        block in a wait (False: acks pending or to come are written without holding)."""
        with self._cond:
            self._carrier = ready
            if not ready:
                self._cond.notify()

    def take(self) -> list[Ack]:
        """Pending acks for the fetcher to send with its lease, when they are no more than
        the worker's slots; each comes back through ``carried`` or ``restore``.

        More pending than slots means jobs end faster than one round trip: carried, they
        would wait behind the lease's script in one pipeline, where the acker writes them
        beside it (a drain of no-op jobs ran 17-22 % slower carrying every batch;
        ``benchmarks.server_cpu --cases drain``). Jobs that wait on I/O end a few at a
        time, and those ride."""
        with self._cond:
            if len(self._pending) > max(1, self.config.concurrency):
                return []
            batch = self._pending[: self.config.ack_batch]
            del self._pending[: len(batch)]
            self._carrying.extend(batch)
            if batch:
                self._cond.notify()  # a hold for them is over
            return batch

    def carried(self, acks: list[Ack], results: list[bool]) -> None:
        """``acks`` were stored with a lease (``results``: the storage's, per ack)."""
        if acks:
            self._written(acks, results)
            self._drop_carried(acks)

    def restore(self, acks: list[Ack]) -> None:
        """The lease that carried ``acks`` failed: they are written here, first."""
        if acks:
            self._drop_carried(acks)
            with self._cond:
                self._pending[:0] = acks
                self._cond.notify()

    def _drop_carried(self, acks: list[Ack]) -> None:
        done = {id(a) for a in acks}
        with self._cond:
            self._carrying = [a for a in self._carrying if id(a) not in done]

    def tick(self) -> int:
        """Write one batch of pending acks; returns how many were written (0 on failure)."""
        with self._cond:
            if not self._writing:
                batch = self._pending[: self.config.ack_batch]
                del self._pending[: len(batch)]
                self._writing = batch
            batch = self._writing
        if not batch:
            return 0
        before = self.written
        try:
            try:
                self._write(batch)
            except _OUTAGES:
                raise
            except Exception as exc:  # not an outage: an outcome is at fault
                log.error("writing %d ack(s) failed (%s); writing them apart", len(batch),
                          _reason(exc))
                self._write_apart(batch, exc)
        except _OUTAGES as exc:  # an outage is one line; the acks are kept and written later
            self._failures += 1
            log.warning("writing %d ack(s) failed: %s; keeping them and retrying", len(batch),
                        _reason(exc))
            return self.written - before
        self._failures = 0
        with self._cond:
            self._writing = []
        return self.written - before

    def write_now(self, acks: list[Ack]) -> list[bool]:
        """Write ``acks`` in the caller's thread, now, as a batch of the acker's own is
        written: the storage call, then their broker deliveries settled. For what must be
        stored before the caller goes on (isolation's hand-back); raises what the store
        raised, and nothing is kept to retry."""
        results = self.storage.ack(acks)
        self._settle(acks)
        return results

    def _settle(self, acks: list[Ack]) -> None:
        """The store has these outcomes (applied or refused): a broker's deliveries of these
        jobs are done with. A worker that kept holding one took the job's next message, if
        it came redelivered, for a duplicate of a job running here, and dropped it."""
        if self.on_written is not None:
            try:
                self.on_written([a.job_id for a in acks])
            except BrokerUnavailable as exc:
                # The outcomes are stored: an unsettled delivery comes back and is skipped.
                log.warning("settling %d delivery(ies) with the broker failed: %s", len(acks),
                            exc)

    def _write(self, acks: list[Ack]) -> None:
        """One storage call for ``acks``; they leave ``_writing`` once written."""
        self._written(acks, self.storage.ack(acks))
        self._forget(acks)

    def _written(self, acks: list[Ack], results: list[bool]) -> None:
        """What follows a stored batch: deliveries settled, refusals counted."""
        self._settle(acks)
        refused = len(results) - sum(1 for ok in results if ok)
        if refused:
            self.refused += refused
            log.warning("%d ack(s) refused: the job's lease had passed to another worker", refused)
        self.written += len(acks)

    def _forget(self, acks: list[Ack]) -> None:
        """Take written (or given up) acks out of the batch being written."""
        done = {id(a) for a in acks}
        with self._cond:
            self._writing = [a for a in self._writing if id(a) not in done]

    def _write_apart(self, acks: list[Ack], exc: Exception) -> None:
        """Write ``acks``, which the storage refused together with ``exc``, in halves; the
        one ack at fault is replaced by its bare ``dead`` outcome. Outages propagate."""
        if len(acks) == 1:
            self._write_bare(acks[0], exc)
            return
        half = len(acks) // 2
        for part in (acks[:half], acks[half:]):
            try:
                self._write(part)
            except _OUTAGES:
                raise
            except Exception as inner:  # the fault is in this part
                self._write_apart(part, inner)

    def _write_bare(self, ack: Ack, exc: Exception) -> None:
        """Store ``dead`` with the reason in place of an outcome the storage cannot take."""
        reason = f"could not store outcome ({ack.outcome.value}): {_reason(exc)}"
        bare = Ack(ack.job_id, ack.token, Outcome.DEAD, message=reason,
                   error=ErrorInfo(type=type(exc).__name__, message=reason))
        log.error("job %s: %s", ack.job_id, reason)
        try:
            self._write([bare])
        except _OUTAGES:
            raise
        except Exception:  # never hold up the other acks
            # Only ids and ASCII text are left: the storage itself is at fault. Drop it; the
            # lease is no longer extended, so the recoverer puts the job back.
            log.exception("job %s: even its bare outcome could not be stored; dropped", ack.job_id)
        self._forget([ack])

    def flush(self, timeout: float = 10.0) -> bool:
        """Write everything pending now, in this thread; True when nothing is left."""
        deadline = time.monotonic() + timeout
        while len(self) and time.monotonic() < deadline:
            if not self.tick():
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return not len(self)

    def start(self) -> None:
        """Run the flushing thread."""
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="conveyor-acker", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, then write whatever is left."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        self.flush(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._writing and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                if not self._hold():
                    continue
            if not self.tick() and self._failures:
                time.sleep(_RETRY_DELAYS[min(self._failures, len(_RETRY_DELAYS)) - 1])


    def _hold(self) -> bool:
        """Give the fetcher's next lease up to ``ack_hold`` to carry the pending acks
        (called holding the lock); False when it took them all."""
        if self._writing or self._failures or not self._carrier:
            return True
        deadline = time.monotonic() + self.config.ack_hold
        while self._pending and self._carrier and not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        return bool(self._pending) or self._stopping


def _reason(exc: BaseException) -> str:
    """One printable line naming what the storage refused, at most 300 characters."""
    text = printable(f"{type(exc).__name__}: {exc}")
    return text if len(text) <= 300 else f"{text[:297]}..."
