"""Job and batch ids: 24 hex characters, time-ordered, unique across processes and forks."""

from __future__ import annotations

import os
import re
import threading
import time


class _IdClock:
    """State of ``new_id``: the last millisecond and random part this process handed out."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ms = 0
        self.rand = 0

    def reseed(self) -> None:
        # A forked child must not continue the parent's sequence: both would make the same ids.
        self.lock = threading.Lock()
        self.ms = 0


_ids = _IdClock()
os.register_at_fork(after_in_child=_ids.reseed)
_RAND_MAX = (1 << 48) - 1
_SHAPE = re.compile(r"[0-9a-f]{24}")  # what new_id makes
_HEX2 = [f"{i:02x}" for i in range(256)]  # the last two hex digits of an id


def _step(ms: int) -> None:
    """Move the sequence on by one id at clock reading ``ms`` (the caller holds the lock)."""
    if ms > _ids.ms:
        _ids.ms, _ids.rand = ms, int.from_bytes(os.urandom(6), "big") >> 1
    elif _ids.rand < _RAND_MAX:
        _ids.rand += 1
    else:
        _ids.ms, _ids.rand = _ids.ms + 1, 0


def new_id() -> str:
    """A 24-character, time-ordered, random job or batch id (48-bit ms time + 48 random bits).

    Monotonic within a process, like a monotonic ULID: in the same millisecond (or when the
    clock steps back) the random part counts up from the last one, so ids sort in the order
    they were made and a batch's jobs page in enqueue order by id alone.
    """
    ms = int(time.time() * 1000)
    with _ids.lock:
        _step(ms)
        return f"{_ids.ms:012x}{_ids.rand:012x}"


def new_ids(count: int) -> list[str]:
    """``count`` ids, exactly as ``count`` calls of ``new_id`` would make them (one lock and
    one clock read for the lot: the bulk enqueue path makes thousands at a time)."""
    out: list[str] = []
    while len(out) < count:
        ms = int(time.time() * 1000)
        with _ids.lock:
            _step(ms)
            # Count up from there within this millisecond, as far as the random part goes.
            first = _ids.rand
            last = min(first + count - len(out), _RAND_MAX + 1)
            _ids.rand = last - 1
            prefix = f"{_ids.ms:012x}"
        # Runs of up to 256 ids share all but the last two hex digits: one formatted stem
        # per run, then a concatenation per id (a twelfth of formatting each id whole).
        r = first
        while r < last:
            low = r & 0xFF
            step = min(last - r, 256 - low)
            out += map(f"{prefix}{r >> 8:010x}".__add__, _HEX2[low:low + step])
            r += step
    return out


def generated(job_id: str) -> bool:
    """True when ``job_id`` has the shape ``new_id`` makes (24 lowercase hex characters).

    A store that keeps ids per queue checks only other ids across its queues: a
    generated id is new (48 random bits per millisecond), so checking it would cost every
    enqueue a lookup for nothing."""
    return _SHAPE.fullmatch(job_id) is not None
