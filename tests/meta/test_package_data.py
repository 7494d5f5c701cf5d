"""The files a wheel ships beside the code: ``pyproject.toml``'s package data, read against
the source tree. A pattern that matches nothing is a stale line (``web/templates/*`` outlived
the templates); a file no pattern matches is missing from every install but an editable one,
where the tests run, so only this check sees it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads pyproject.toml itself")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "conveyor"
PATTERNS: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())[
    "tool"]["setuptools"]["package-data"]["conveyor"]


def _shipped() -> set[Path]:
    return {path for pattern in PATTERNS for path in PACKAGE.glob(pattern) if path.is_file()}


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_package_data_pattern_matches_a_file(pattern: str) -> None:
    assert [p for p in PACKAGE.glob(pattern) if p.is_file()], (
        f"package data {pattern!r} matches no file under src/conveyor: drop it")


def test_every_file_beside_the_code_is_package_data() -> None:
    """Python sources ship as modules; anything else ships only if a pattern names it."""
    data = {path for path in PACKAGE.rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc")}
    missing = sorted(str(p.relative_to(PACKAGE)) for p in data - _shipped())
    assert not missing, f"not in pyproject.toml's package data, so not in a wheel: {missing}"
