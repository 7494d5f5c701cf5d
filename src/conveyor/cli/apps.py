"""Finding and importing the user's app, as Flask and Django find theirs.

The app is named, in order, by ``--app module:attribute``, by ``$CONVEYOR_APP``, or by the
nearest ``pyproject.toml`` (this directory or a parent) in its ``[tool.conveyor]`` table::

    [tool.conveyor]
    app = "myapp:app"

so that ``conveyor worker`` and every command of a project agree without a flag. The folder of
that ``pyproject.toml`` goes on ``sys.path`` (as does the current directory), so the app
imports from any of the project's sub-folders.

An exception raised while the user's module is imported is the user's: it is reported with
its traceback trimmed to the user's own frames (``UserCodeError``), never as an internal
error of conveyor's.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conveyor.app import Conveyor
from conveyor.errors import ConveyorError

__all__ = ["APP_ENV", "AppLoadError", "AppSpec", "UserCodeError", "find_app", "load_app",
           "user_traceback"]

APP_ENV = "CONVEYOR_APP"
# Frames from these folders are not the user's: conveyor's own source and the importlib
# package that ran the import.
_NOT_USER = (str(Path(__file__).resolve().parents[1]) + os.sep,
             str(Path(importlib.__file__).resolve().parent) + os.sep)


class AppLoadError(ConveyorError):
    """The app (``module:attribute``) could not be found or is not a conveyor app."""


class UserCodeError(ConveyorError):
    """Importing the user's module raised: ``trace`` is its traceback, trimmed to the user's
    frames; the message names the module and the exception."""

    def __init__(self, module: str, spec: str, exc: BaseException) -> None:
        super().__init__(f"your module {module!r} raised {type(exc).__name__} while it was "
                         f"imported (the app {spec}): the traceback above is from your code")
        self.trace = user_traceback(exc)


@dataclass(frozen=True)
class AppSpec:
    """An app named somewhere: ``module:attribute``, where it was named, and the folder a
    ``pyproject.toml`` named it in (put on ``sys.path``)."""

    spec: str
    origin: str
    root: Path | None = None


def find_app(flag: str | None, given_by: str = "--app") -> AppSpec | None:
    """The app ``--app`` names (``given_by``: how the command line gave it), else
    ``$CONVEYOR_APP``, else the nearest ``pyproject.toml``'s ``[tool.conveyor] app``; None
    when nothing names one."""
    if flag:
        return AppSpec(flag, given_by)
    env = os.environ.get(APP_ENV)
    if env:
        return AppSpec(env, APP_ENV)
    return _from_pyproject(Path.cwd())


def _from_pyproject(start: Path) -> AppSpec | None:
    """``[tool.conveyor] app`` of the nearest ``pyproject.toml`` at or above ``start`` (the
    project's own: a parent project's file above it is not read)."""
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if path.is_file():
            return _read_pyproject(path)
    return None


def _read_pyproject(path: Path) -> AppSpec | None:
    try:
        spec = _tool_conveyor_app(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # TOMLDecodeError is one
        raise AppLoadError(f"cannot read {path}: {exc}") from None
    if spec is None:
        return None
    if not isinstance(spec, str):
        raise AppLoadError(f"[tool.conveyor] app in {path} must be a string like "
                           '"myapp:app"')
    return AppSpec(spec, f"[tool.conveyor] in {path}", path.parent)


def _tool_conveyor_app(text: str) -> object:
    """The value of ``app`` in the ``[tool.conveyor]`` table of a ``pyproject.toml``."""
    if sys.version_info >= (3, 11):
        import tomllib

        table = tomllib.loads(text).get("tool", {}).get("conveyor", {})
        return table.get("app") if isinstance(table, dict) else None
    # Python 3.10 has no TOML reader: the one line ``app = "module:attr"`` of the table
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            inside = stripped == "[tool.conveyor]"
        elif inside and (found := _APP_LINE.match(stripped)):
            return found.group(1)
    return None


_APP_LINE = re.compile(r"""^app\s*=\s*["']([^"']*)["']\s*(#.*)?$""")


def load_app(spec: str, root: Path | None = None) -> Conveyor:
    """Import ``module:attribute`` (the current directory, and ``root`` when given, on
    ``sys.path``); ``AppLoadError`` when it cannot be found, ``UserCodeError`` when the
    module raised while being imported."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppLoadError(f"app {spec!r} must look like module:attribute, e.g. myapp:app")
    for folder in (str(root) if root else None, os.getcwd()):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if _names_the_module(exc, module_name):
            raise AppLoadError(f"cannot import {module_name!r}: {exc} (looked in "
                               f"{os.getcwd()}{f' and {root}' if root else ''} and sys.path)"
                               ) from None
        raise UserCodeError(module_name, spec, exc) from exc
    except Exception as exc:  # SyntaxError too: anything the user's module raised
        raise UserCodeError(module_name, spec, exc) from exc
    app: Any = module
    for part in attr.split("."):
        app = getattr(app, part, None)
        if app is None:
            raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}")
    if not isinstance(app, Conveyor):
        raise AppLoadError(f"{spec} is a {type(app).__name__}, not a conveyor.Conveyor app")
    return app


def _names_the_module(exc: ModuleNotFoundError, module_name: str) -> bool:
    """Whether the missing module is the app's module (or a package on its path), not one
    that the user's module imports."""
    missing = exc.name or ""
    return bool(missing) and (module_name == missing or module_name.startswith(missing + "."))


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` (and of the exceptions chained to it) without conveyor's and
    the import machinery's frames: what is left is the user's code (and the libraries it
    called)."""
    shown = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    todo = [shown]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        node.stack = traceback.StackSummary.from_list(
            [frame for frame in node.stack if _is_user(frame.filename)])
        todo.extend(n for n in (node.__cause__, node.__context__) if n is not None)
    return "".join(shown.format())


def _is_user(filename: str) -> bool:
    if filename.startswith("<frozen importlib"):
        return False
    try:
        return not str(Path(filename).resolve()).startswith(_NOT_USER)
    except OSError:
        return True
