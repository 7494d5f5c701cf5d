"""The storage boundary holds: outside ``conveyor/storage/`` no module knows which backend it
talks to (docs/internals/storage.md).

Read from the source (``ast``), not by importing, so a module that is never imported in the
suite is checked too. Three facts per module:

* it imports no database client (``sqlite3``, ``redis``, ``psycopg``…) and no backend package
  (``conveyor.storage.<backend>``); ``conveyor.storage`` and its backend-neutral modules
  (``base``, ``records``, ``rules``) are the way in;
* no string in its code names a backend (docstrings are prose and may);
* it never probes a storage for a method with ``getattr``/``hasattr``: what a backend can do
  is a member of the protocol, called as one.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.storage.delegate import Delegate
from conveyor.storage.memory.storage import MemoryStorage
from conveyor.storage.postgres.storage import PostgresStorage
from conveyor.storage.redis.storage import RedisStorage
from conveyor.storage.sqlite.storage import SqliteStorage

SRC = Path(__file__).resolve().parents[2] / "src" / "conveyor"
STORAGE = SRC / "storage"
# Every sub-package of storage/ is a backend; its plain modules are backend-neutral.
BACKENDS = sorted(p.name for p in STORAGE.iterdir() if (p / "__init__.py").exists())
CLIENTS = ("sqlite3", "redis", "valkey", "psycopg", "psycopg2", "asyncpg", "aiosqlite")
WORDS = ("sqlite", "redis", "valkey", "postgres")
# What a backend object can be asked for: the public methods of every backend class, its own
# or a part's (``storage/delegate.py``).
METHODS = {name for cls in (MemoryStorage, SqliteStorage, RedisStorage, PostgresStorage)
           for name, member in inspect.getmembers(
               cls, lambda m: callable(m) or isinstance(m, Delegate))
           if not name.startswith("_")}


def _modules() -> Iterator[Path]:
    for path in sorted(SRC.rglob("*.py")):
        if STORAGE not in path.parents:
            yield path


MODULES = list(_modules())


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are docstrings (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def _imported(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every module name imported, including ``importlib.import_module("...")``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.lineno, node.args[0].value


def _rel(path: Path) -> str:
    return str(path.relative_to(SRC.parent))


def test_the_scan_sees_every_module_and_every_backend() -> None:
    assert BACKENDS == ["memory", "postgres", "redis", "sqlite"]
    names = {_rel(p) for p in MODULES}
    assert {"conveyor/views/records.py", "conveyor/cli/main.py", "conveyor/web/app.py",
            "conveyor/worker/launcher.py"} <= names
    assert not any(n.startswith("conveyor/storage/") for n in names)
    assert {"now", "check_server", "wait_dequeue", "list_jobs"} <= METHODS


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_database_client_or_backend_is_imported(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for line, name in _imported(tree):
        parts = name.split(".")
        if parts[0] in CLIENTS:
            bad.append(f"line {line}: {name}")
        if parts[:2] == ["conveyor", "storage"] and len(parts) > 2 and parts[2] in BACKENDS:
            bad.append(f"line {line}: {name}")
    assert not bad, f"{_rel(path)} reaches past the storage boundary: {bad}"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_code_names_a_backend(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    bad = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            text = node.name
        if text is not None and any(word in text.lower() for word in WORDS):
            bad.append(f"line {getattr(node, 'lineno', '?')}: {text[:60]!r}")
    assert not bad, f"{_rel(path)} names a backend in code: {bad}"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_storage_is_probed_for_a_method(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in METHODS):
            bad.append(f"line {node.lineno}: {node.func.id}(…, {node.args[1].value!r})")
    assert not bad, f"{_rel(path)} asks an object whether it has a storage method: {bad}"
