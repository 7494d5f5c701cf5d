"""The shape of ``src/conveyor``: layers importing only downwards, no import circle, small modules.

Every import statement counts, wherever it stands: at the top, inside a function, or under
``if TYPE_CHECKING:`` (a type-only back edge is still coupling: the two modules can no longer
be read, tested or changed one without the other). Imports of a package's parent made
implicitly by Python (``conveyor/__init__.py`` running before ``conveyor.job``) do not count;
only what a module spells out does. docs/design.md §1 draws the same layers.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "conveyor"
MAX_LINES = 400

# Lowest first. A module may import modules of its own layer or of a lower one, never of a
# higher one. Every module must be listed (a pattern ending in ``.*`` covers a package's
# modules), so a new module is placed deliberately.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # plain data and rules, no I/O
    ("base", ("conveyor.errors", "conveyor.text", "conveyor.ids", "conveyor.clock", "conveyor.node",
              "conveyor.flow_control",
              "conveyor.serializer", "conveyor.job", "conveyor.hooks", "conveyor.retry",
              "conveyor.calls", "conveyor.reraise", "conveyor.naming", "conveyor.steps")),
    # the storage boundary and the backends
    ("storage", ("conveyor.storage", "conveyor.storage.*")),
    # the broker boundary beside it (delivery only: the store still holds every job's state)
    ("broker", ("conveyor.broker", "conveyor.broker.*")),
    # enqueueing and what a job sees: options, drafts, refs, the Client, job functions, batches
    ("client", ("conveyor.options", "conveyor.refs", "conveyor.draft", "conveyor.iteration",
                "conveyor.durable", "conveyor.context", "conveyor.messaging",
                "conveyor.signature", "conveyor.builtin_jobs", "conveyor.middleware",
                "conveyor.registry", "conveyor.bulk", "conveyor.client",
                "conveyor.batch", "conveyor.workflow", "conveyor.running_workflow",
                "conveyor.canvas_run", "conveyor.canvas", "conveyor.periodic",
                "conveyor.schedules", "conveyor.member")),
    # the application object that wires the parts, and the public API re-exported from it
    ("app", ("conveyor.aio_app", "conveyor.app", "conveyor")),
    # running jobs (built from an app, never built by one)
    ("worker", ("conveyor.worker", "conveyor.worker.*")),
    # operations surfaces and integrations
    ("top", ("conveyor.testing", "conveyor.views", "conveyor.failures", "conveyor.search",
             "conveyor.history",
             "conveyor.cli",
             "conveyor.cli.*",
             "conveyor.web", "conveyor.web.*", "conveyor.metrics", "conveyor.asgi",
             "conveyor.server", "conveyor.otel", "conveyor.contrib", "conveyor.contrib.*",
             "conveyor.dev", "conveyor.dev.*")),
]


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


def layer_of(module: str) -> int | None:
    for index, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
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
        "from .storage import base\n"
        "if TYPE_CHECKING:\n"
        "    from conveyor.app import Conveyor\n"
        "def later():\n"
        "    import conveyor.worker.launcher\n"
    )
    names = set(_imported("conveyor", source))
    assert names == {"typing", "conveyor.job", "conveyor", "conveyor.storage.base",
                     "conveyor.app", "conveyor.worker.launcher"}
    assert "conveyor.storage.base" in graph()["conveyor.views"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_is_in_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if layer_of(m) is None)
    assert not unplaced, f"place these modules in LAYERS (tests/meta/test_layers.py): {unplaced}"
    stale = [p for _, patterns in LAYERS for p in patterns
             if not any(fnmatch.fnmatchcase(m, p) for m in MODULES)]
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


def test_no_module_over_the_line_limit() -> None:
    long = {m: n for m, p in MODULES.items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by what they hold): {long}"
