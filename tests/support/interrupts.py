"""A pytest plugin: Ctrl-C reaches the commands the tests start.

A shell without job control starts a background job (``nohup make test &``, some CI
runners) with SIGINT ignored, and an ignored signal stays ignored across ``exec``: every
``conveyor`` command a test starts would then ignore the SIGINT the test sends it as a user's
Ctrl-C, and the test would wait for its timeout. A handled signal is reset to its default at
``exec``, so handling it here gives each command Python's own KeyboardInterrupt again.
Loaded by tests/conftest.py.
"""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Handle SIGINT as Python does by default when this process was started ignoring it."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
