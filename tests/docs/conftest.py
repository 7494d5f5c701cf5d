"""Fixtures of the doc-page tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def in_tmp(tmp_path: Path) -> Iterator[Path]:
    """Run in ``tmp_path``: a page's app opens ``sqlite:///jobs.db`` there."""
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(before)
