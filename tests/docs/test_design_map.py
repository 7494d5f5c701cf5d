"""docs/design.md is a map that stays true (issue 52 item 6; Django's and CPython's docs keep
their module references checked by their builds, as ``sphinx -n`` does).

Checked from the text, no import needed:

* every module, folder, page and ``conveyor.…`` path that design.md or a page of
  docs/internals/ names exists; in design.md's tree of ``src/conveyor/`` each name exists in
  the folder its line names;
* design.md names every package of ``src/conveyor``, every test folder and every page of docs/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.test_module_paths import resolves

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "conveyor"
DOCS = ROOT / "docs"
DESIGN = DOCS / "design.md"
PAGES = [DESIGN, *sorted((DOCS / "internals").glob("*.md"))]
SKIP_DIRS = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}

PATHLIKE = re.compile(r"^(?:\.\./)?[\w.-]+(?:/[\w.-]+)*(?:/|\.(?:py|md|sql|lua|js|css|svg))$")
DOTTED = re.compile(r"^conveyor(?:\.\w+)+$")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _files() -> set[str]:
    """Every path under the repository (files and folders, posix, relative), for names given
    without their folder (``batch_pages.py``, ``lua/_record.lua``)."""
    out: set[str] = set()
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if SKIP_DIRS.intersection(rel.parts) or rel.parts[0].endswith(".egg-info"):
            continue
        out.add(rel.as_posix() + ("/" if path.is_dir() else ""))
    return out


FILES = _files()


def _blocks(text: str) -> Iterator[list[str]]:
    """The fenced code blocks of a page, as lists of lines."""
    block: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if block is None:
                block = []
            else:
                yield block
                block = None
        elif block is not None:
            block.append(line)


def named(page: Path) -> set[str]:
    """What a page names: paths and ``conveyor.…`` names in backticks, link targets, and
    path-like words of its code blocks."""
    text = page.read_text(encoding="utf-8")
    words = {w for span in SPAN.findall(text) for w in re.split(r"[\s,:()]+", span)}
    words |= {w for block in _blocks(text) for line in block for w in line.split()}
    words = {w.strip("`'\".;,") for w in words}
    out = {w for w in words if PATHLIKE.match(w) or DOTTED.match(w)}
    out |= {t for t in LINK.findall(text) if "://" not in t}
    return out


def exists(name: str, page: Path) -> bool:
    """Whether a named path or module exists: relative to the page, the repository,
    ``src/conveyor`` or docs/, or as the tail of a path in the repository."""
    if DOTTED.match(name):
        return resolves(name)
    for base in (page.parent, ROOT, SRC, DOCS):
        candidate = (base / name).resolve()
        if candidate.exists() and (candidate.is_dir() or not name.endswith("/")):
            return True
    tail = name.removeprefix("../")
    return any(f == tail or f.endswith("/" + tail) for f in FILES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_name_on_the_page_exists(page: Path) -> None:
    missing = sorted(n for n in named(page) if not exists(n, page))
    assert not missing, f"{page.relative_to(ROOT)} names what does not exist: {missing}"


def tree_names() -> Iterator[tuple[str, str]]:
    """(line, path) for every name in design.md's tree. A line without indent names a top
    folder (``src/conveyor/``, ``tests/``); on an indented line the folders written first are
    in that top folder, and the files after them in the last of those folders (or, on a
    line that starts with a file, in the top folder itself; on a deeper continuation line,
    in the folder of the line above): ``core/  job.py`` is ``src/conveyor/core/job.py``."""
    text = DESIGN.read_text(encoding="utf-8")
    block = next(b for b in _blocks(text) if b and b[0].strip() == "src/conveyor/")
    root = folder = ""
    for line in block:
        words = [w for w in line.split() if PATHLIKE.match(w)]
        if not line.startswith(" "):
            root = folder = line.split()[0]
            yield line, root
            continue
        indent = len(line) - len(line.lstrip())
        if words and indent == 2 and not words[0].endswith("/"):
            folder = root
        files = False
        for word in words:
            if word.endswith("/") and not files:
                folder = root + word
                yield line, folder
            else:
                files = True
                yield line, folder + word


def test_every_name_in_the_tree_is_where_its_line_says() -> None:
    found = list(tree_names())
    assert ("  workflow/  graph.py running.py canvas.py canvas_run.py",
            "src/conveyor/workflow/graph.py") in found  # the parser reads lines as meant
    missing = [f"{path} ({line.strip()[:40]}…)" for line, path in found
               if not (ROOT / path).exists()]
    assert not missing, f"design.md's tree names what is not there: {missing}"


def test_design_names_every_package_test_folder_and_page() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    tree = {path for _, path in tree_names()}
    packages = sorted(p.parent.relative_to(ROOT).as_posix() + "/"
                      for p in SRC.rglob("__init__.py") if p.parent != SRC)
    unnamed = [p for p in packages if p not in tree]
    assert not unnamed, f"packages design.md's tree does not show: {unnamed}"
    folders = sorted(f"tests/{p.name}/" for p in (ROOT / "tests").iterdir()
                     if (p / "__init__.py").exists())
    unnamed = [f for f in folders if f not in tree]
    assert not unnamed, f"test folders design.md's tree does not show: {unnamed}"
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if p != DESIGN)
    unnamed = [p for p in pages if f"({p})" not in text]
    assert not unnamed, f"pages design.md does not link: {unnamed}"


def test_the_checks_see_a_wrong_name() -> None:
    assert {"core/job.py", "conveyor.client", "internals/storage.md"} <= named(DESIGN)
    assert exists("conveyor.client.batch.wait_batch", DESIGN)
    assert not exists("conveyor.batch.wait_batch", DESIGN)  # the module before it moved
    assert not exists("broker/kafka_url.py", DESIGN) and not exists("aio_app.py", DESIGN)
