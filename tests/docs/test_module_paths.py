"""Every ``conveyor`` import path the docs give users works (issue 52 item 3: moving modules
into packages must not break a documented path; a documented path that moved keeps a
re-export, ``conveyor.options`` and its kin).

Read from the pages: a ``from conveyor.x import a, b`` line of a code block (each name
imported), and a backticked ``conveyor.x.y`` whose ``x`` is a module or package of conveyor
(``conveyor.job.name`` is a span attribute, not a path: ``job`` is no module of the root).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "conveyor"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ROOT_NAMES = {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir()
                                                   if (p / "__init__.py").exists()}
IMPORT = re.compile(r"^\s*from (conveyor(?:\.\w+)*) import \(?([\w, ]+)\)?\s*(?:#.*)?$", re.M)
MENTION = re.compile(r"`(conveyor(?:\.\w+)+)(?:\([^`]*\))?`")


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of conveyor, or a name reached from one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def documented(page: Path) -> list[str]:
    """The import paths a page gives: ``module.name`` for each name of an import line, and
    each backticked path into a conveyor module."""
    text = page.read_text(encoding="utf-8")
    found = [f"{module}.{name.strip().split(' as ')[0]}" for module, names in IMPORT.findall(text)
             for name in names.split(",") if name.strip()]
    found += [m for m in MENTION.findall(text) if m.split(".")[1] in ROOT_NAMES]
    return found


def test_the_reader_sees_imports_and_mentions() -> None:
    page = ROOT / "docs" / "api.md"
    assert "conveyor.options.make_options" in documented(page)
    assert "conveyor.testing.drain" in documented(page)
    assert not resolves("conveyor.options.no_such_name")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_documented_import_path_works(page: Path) -> None:
    broken = sorted({path for path in documented(page) if not resolves(path)})
    assert not broken, f"{page.relative_to(ROOT)} gives import paths that do not work: {broken}"
