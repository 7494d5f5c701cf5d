"""A pytest plugin: under ``CI=true`` a skip is a failure unless its reason is allowed.

A skip is a test that did not run. Locally it is useful (no redis-server on a laptop); in CI it
hides breakage: a broken import of a backend, a missing fixture or server would turn whole
families of cases into skips and the run would stay green. Loaded by tests/conftest.py.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

#: The only skips CI accepts (substrings of the reason).
CI_ALLOWED_SKIPS = (
    "root can write anywhere",  # tests/sqlite/test_open.py: CI containers run as root
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Under ``CI=true``, a skip whose reason is not in ``CI_ALLOWED_SKIPS`` is a failure."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and ci_refuses_skips():
        reason = skip_reason(report.longrepr)
        if not any(allowed in reason for allowed in CI_ALLOWED_SKIPS):
            report.outcome = "failed"
            report.longrepr = (f"unexpected skip in CI: {reason} (allow it in "
                               "tests/support/ci_skips.py CI_ALLOWED_SKIPS if it is expected)")
    return report


def ci_refuses_skips() -> bool:
    """True on CI (``CI=true``, as GitHub Actions, GitLab and most runners set it)."""
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def skip_reason(longrepr: object) -> str:
    """The reason text of a skip report (pytest stores ``(path, line, "Skipped: why")``)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)
