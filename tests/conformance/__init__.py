"""The black-box conformance suite: every storage backend, through ``open_storage`` only.

Run one backend with ``pytest tests/conformance -k sqlite`` (``memory``, ``sqlite``,
``postgres``, ``redis``, ``redis_cluster``, ``redis_sentinel``). Time comes from a
``FakeClock`` the test moves; nothing sleeps. A backend that raises ``NotImplementedError``
is reported as skipped with the reason, never as passed.
"""
