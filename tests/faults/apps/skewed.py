"""The chaos app in a process whose wall clock is off by ``CONVEYOR_FAULTS_SKEW`` seconds.

Debian's libfaketime 0.9.10 cannot run a Python worker: with the monotonic clock faked,
``threading.Event.wait(timeout)`` never returns (libfaketime issues #390, #469); with
``FAKETIME_DONT_FAKE_MONOTONIC=1``, ``time.sleep`` fails with EINVAL. So the skew is applied
where conveyor reads the wall clock: ``time.time`` and ``time.time_ns`` are replaced before
conveyor or the app is imported. Timeouts and sleeps keep using the real monotonic clock.
"""

from __future__ import annotations

import os
import time

SKEW_ENV = "CONVEYOR_FAULTS_SKEW"

_offset = float(os.environ.get(SKEW_ENV, "0"))
_real_time = time.time
_real_time_ns = time.time_ns


def _skewed_time() -> float:
    return _real_time() + _offset


def _skewed_time_ns() -> int:
    return _real_time_ns() + int(_offset * 1e9)


time.time = _skewed_time
time.time_ns = _skewed_time_ns

from tests.faults.apps.chaos import app  # noqa: E402 - the clock must be skewed first

__all__ = ["app"]
