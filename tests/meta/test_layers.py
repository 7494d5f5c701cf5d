"""The shape of ``src/conveyor``: layers importing only downwards, no import circle, small modules.

Every import statement counts, wherever it stands: at the top, inside a function, or under
``if TYPE_CHECKING:`` (a type-only back edge is still coupling: the two modules can no longer
be read, tested or changed one without the other). Imports of a package's parent made
implicitly by Python (``conveyor/__init__.py`` running before ``conveyor.core.job``) do not
count; only what a module spells out does. docs/design.md ("Layers") draws the same layers.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "conveyor"
MAX_LINES = 400  # a longer module is reported
HARD_LINES = 600  # and one longer than this fails

# Lowest first. A module may import modules of its own layer or of a lower one, never of a
# higher one. A layer lists packages (``conveyor.client`` covers every module in client/) and,
# at the root, modules by name: the root holds the public surface and the app. Every package
# and root module must be listed, so placing a module is choosing its folder.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # plain data and rules, no I/O
    ("core", ("conveyor.core", "conveyor.errors")),
    # the storage boundary and the backends
    ("storage", ("conveyor.storage",)),
    # the blob stores beside it: job data kept by reference (a directory, S3, memory; the
    # PostgreSQL store's own table is a storage module)
    ("blobs", ("conveyor.blobs",)),
    # the broker boundary beside it (delivery only: the store still holds every job's state)
    ("broker", ("conveyor.broker",)),
    # enqueueing and what a job sees: options, drafts, refs, the Client, job functions, batches
    ("client", ("conveyor.client",)),
    # graphs of jobs, and Celery's canvas on them
    ("workflow", ("conveyor.workflow",)),
    # many jobs, one call
    ("aggregation", ("conveyor.aggregation",)),
    # the application object that wires the parts, and the public API re-exported from it
    # (options, middleware and registry keep documented import paths: thin re-exports)
    ("app", ("conveyor", "conveyor.app", "conveyor.hooks", "conveyor.options",
             "conveyor.middleware", "conveyor.registry")),
    # running jobs (built from an app, never built by one)
    ("worker", ("conveyor.worker",)),
    # what an operator reads, from the Inspector alone
    ("views", ("conveyor.views",)),
    # what every HTTP endpoint shares
    ("http", ("conveyor.http",)),
    # operations surfaces and integrations
    ("surfaces", ("conveyor.testing", "conveyor.otel", "conveyor.metrics", "conveyor.cli",
                  "conveyor.web", "conveyor.contrib", "conveyor.dev")),
]


# Root modules that only keep a documented import path (docs/api.md, docs/operations.md):
# users import them, conveyor never does, so each stays a list of re-exports.
REEXPORTS = ("conveyor.options", "conveyor.middleware", "conveyor.registry", "conveyor.metrics")


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = modules()


def _owner(name: str) -> str | None:
    """The module ``name`` lives in: itself, or the nearest enclosing package we know."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imported(package: str, source: str) -> Iterator[str]:
    """Every module named in an import statement of ``source``, anywhere in it; relative
    imports are resolved against ``package``, the package the source belongs to."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from conveyor.web import pages`` imports the module conveyor.web.pages;
            # ``from conveyor.storage import Backend`` a name of the package conveyor.storage.
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in MODULES else base


def graph() -> dict[str, set[str]]:
    """module -> the conveyor modules it imports (itself excluded)."""
    edges: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names = _imported(package, path.read_text(encoding="utf-8"))
        targets = {_owner(name) for name in names
                   if name == "conveyor" or name.startswith("conveyor.")}
        edges[module] = {t for t in targets if t is not None and t != module}
    return edges


def place(module: str) -> str:
    """What a layer lists for ``module``: its package under ``conveyor`` (``conveyor.client``
    for ``conveyor.client.registry``), or itself for a root module and the root package."""
    parts = module.split(".")
    root_file = PACKAGE / f"{parts[-1]}.py"
    if len(parts) == 1 or (len(parts) == 2 and root_file.exists()):
        return module
    return ".".join(parts[:2])


def layer_of(module: str) -> int | None:
    for index, (_, places) in enumerate(LAYERS):
        if place(module) in places:
            return index
    return None


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path ``[a, b, ..., a]``, or None (iterative DFS, three colours)."""
    done: set[str] = set()
    for root in sorted(edges):
        if root in done:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        on_path = [root]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.pop()
                done.add(node)
            elif child in on_path:
                return [*on_path[on_path.index(child):], child]
            elif child not in done:
                stack.append((child, iter(sorted(edges.get(child, ())))))
                on_path.append(child)
    return None


def test_the_graph_sees_type_checking_and_function_local_imports() -> None:
    # The checks below are only as good as the parser; pin what it must see.
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import job\n"
        "from conveyor import Conveyor\n"
        "from ..storage import base\n"
        "if TYPE_CHECKING:\n"
        "    from conveyor.app import Conveyor\n"
        "def later():\n"
        "    import conveyor.worker.launcher\n"
    )
    names = set(_imported("conveyor.core", source))
    assert names == {"typing", "conveyor.core.job", "conveyor", "conveyor.storage.base",
                     "conveyor.app", "conveyor.worker.launcher"}
    assert "conveyor.storage.base" in graph()["conveyor.views.records"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_is_in_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if layer_of(m) is None)
    assert not unplaced, f"place these modules in LAYERS (tests/meta/test_layers.py): {unplaced}"
    stale = [p for _, places in LAYERS for p in places
             if not any(place(m) == p for m in MODULES)]
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_import_circle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_no_module_imports_a_higher_layer() -> None:
    upward = []
    for module, targets in sorted(graph().items()):
        own = layer_of(module)
        for target in sorted(targets):
            their = layer_of(target)
            if own is not None and their is not None and their > own:
                upward.append(f"{module} ({LAYERS[own][0]}) imports {target} ({LAYERS[their][0]})")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


class LongModule(UserWarning):
    """A module over ``MAX_LINES``: split it by what it holds before it reaches ``HARD_LINES``."""


def long_modules(limit: int) -> dict[str, int]:
    """Modules longer than ``limit`` lines, with their length."""
    return {m: n for m, p in MODULES.items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit}


def test_no_module_over_the_line_limit() -> None:
    """Over ``MAX_LINES`` a module is reported (a pytest warning naming each one); over
    ``HARD_LINES`` the test fails: a module that long holds more than one concept."""
    hard = long_modules(HARD_LINES)
    assert not hard, f"modules over {HARD_LINES} lines (split them by what they hold): {hard}"
    for module, lines in sorted(long_modules(MAX_LINES).items()):
        warnings.warn(LongModule(f"{module} has {lines} lines (over {MAX_LINES}): split it by "
                                 "what it holds"), stacklevel=1)
