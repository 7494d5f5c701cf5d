"""No coupling around the layer test: what the import graph cannot see.

The layer test reads import statements. Two ways around it do not import upwards and still
tie a lower module to a higher one: a slot the higher module fills when it is imported
(``set_workflow_scope(RunningWorkflow)`` at the end of a module, so that ``JobContext``
could build what a higher layer defines), and reaching the app's parts by name through an
object handed down untyped (``getattr(ctx.app, "client")``, ``current_job().app.registry``).
Both are refused here: a module below the app is given what it uses, typed (the job's
``JobRuntime``, the client's ``CanvasOps``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from conveyor import Conveyor
from tests.meta.test_layers import LAYERS, MODULES, layer_of

APP_LAYER = next(i for i, (name, _) in enumerate(LAYERS) if name == "app")
# Layers the app is built from and hands its parts to (storage and broker never see an app;
# tests/meta/test_boundary.py holds them to their protocols).
HANDED = {"core", "client", "workflow", "aggregation"}


def app_parts() -> set[str]:
    """The names of the app's public attributes and parts (``client``, ``registry``, ...)."""
    app = Conveyor("memory://")
    try:
        return {n for n in (*vars(app), *dir(Conveyor)) if not n.startswith("_")}
    finally:
        app.close()


def import_time_calls(source: str) -> Iterator[tuple[int, str]]:
    """Calls made for their effect when the module is imported, to a function another
    conveyor module defines: a top-level statement that is a call (its value unused) of a
    name imported from ``conveyor``. A constant computed at import (``X = f()``) is not one."""
    tree = ast.parse(source)
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("conveyor"):
            imported.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names
                            if a.name.startswith("conveyor"))
    for node in tree.body:
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        while isinstance(func, ast.Attribute):
            func = func.value
        if isinstance(func, ast.Name) and func.id in imported:
            yield node.lineno, ast.unparse(node.value.func)


def reaches(source: str, parts: set[str]) -> Iterator[tuple[int, str]]:
    """Reads of an ``.app`` attribute, and ``getattr``/``hasattr`` of one of the app's parts
    by a literal name."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "app" \
                and isinstance(node.ctx, ast.Load):
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and name.value in parts:
                yield node.lineno, ast.unparse(node)


def test_the_checks_see_what_they_refuse() -> None:
    slot = ("from conveyor.client.context import set_workflow_scope\n"
            "import conveyor.client.signature as sig\n"
            "class RunningWorkflow: ...\n"
            "set_workflow_scope(RunningWorkflow)\n"
            "sig.set_canvas(object())\n"
            "CANVAS = make()\n"
            "log = logging.getLogger('x')\n")
    assert [line for line, _ in import_time_calls(slot)] == [4, 5]
    reach = ("def f(ctx):\n"
             "    client = getattr(ctx.app, 'client', None)\n"
             "    return current_job().app.registry, getattr(ctx, 'url'), hasattr(x, 'other')\n"
             "ctx.app = None\n")
    assert sorted(text for _, text in reaches(reach, {"client", "url"})) == [
        "ctx.app", "current_job().app", "getattr(ctx, 'url')", "getattr(ctx.app, 'client', None)"]
    assert {"client", "registry", "storage", "runtime"} <= app_parts()


def test_importing_a_module_changes_no_other_module() -> None:
    found = [f"{module}:{line}: {what}(...)" for module, path in sorted(MODULES.items())
             for line, what in import_time_calls(path.read_text(encoding="utf-8"))]
    assert not found, ("a module calls another at import (a slot a higher layer fills? give "
                       "the lower module what it uses instead):\n" + "\n".join(found))


def test_nothing_below_the_app_reaches_into_it() -> None:
    parts = app_parts()
    found = []
    for module, path in sorted(MODULES.items()):
        layer = layer_of(module)
        if layer is None or layer >= APP_LAYER or LAYERS[layer][0] not in HANDED:
            continue
        found += [f"{module}:{line}: {text}"
                  for line, text in reaches(path.read_text(encoding="utf-8"), parts)]
    assert not found, ("a module below the app reaches into it (hand it what it uses, typed: "
                       "JobRuntime, CanvasOps):\n" + "\n".join(found))


def test_the_handed_layers_exist() -> None:
    assert {name for name, _ in LAYERS} >= HANDED


def not_implemented_stubs(source: str) -> Iterator[tuple[int, str]]:
    """Methods whose body raises ``NotImplementedError``: a mixin's stub for what the class
    it is mixed into defines, or an interface written without ``abc``."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmt in node.body:
            exc = stmt.exc if isinstance(stmt, ast.Raise) else None
            if isinstance(exc, ast.Call):
                exc = exc.func
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                yield node.lineno, node.name


def test_no_method_is_a_not_implemented_stub() -> None:
    """A class needing a method it does not define says so with ``abc`` (a real interface:
    ``Canvas``, ``PeriodicComponent``) or takes a collaborator that has it; the backends'
    shapes are held by tests/meta/test_backend_shape.py."""
    assert [name for _, name in not_implemented_stubs(
        "class A:\n    def f(self):\n        raise NotImplementedError\n"
        "    def g(self):\n        raise NotImplementedError('no')\n"
        "    def h(self):\n        return 1\n")] == ["f", "g"]
    found = [f"{module}:{line}: {name}" for module, path in sorted(MODULES.items())
             if not module.startswith("conveyor.storage.")
             for line, name in not_implemented_stubs(path.read_text(encoding="utf-8"))]
    assert not found, "NotImplementedError stubs (use abc, or composition):\n" + "\n".join(found)
