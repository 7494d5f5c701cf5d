"""A job function's stored name: ``module.qualname``, never ``__main__.…`` (which no worker
could resolve): a function defined in a script run as ``python myapp.py`` is named after the
module a worker imports it as (``myapp.register_product``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from conveyor.errors import ConveyorError

__all__ = ["UnimportableJobError", "check_importable", "default_name", "importable_module"]


class UnimportableJobError(ConveyorError, TypeError):
    """A job function's default name points at ``__main__`` with no importable module."""


def default_name(func: Callable[..., Any]) -> str:
    """The stored name of a job function: ``module.qualname``.

    ``__main__`` is replaced by the module a worker would import the script as (see
    ``importable_module``); where there is none (an interactive session, ``python -c``) the
    name keeps ``__main__`` and enqueueing such a job raises ``UnimportableJobError``.
    """
    module = getattr(func, "__module__", None) or "__main__"
    if module == "__main__":
        module = importable_module() or module
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    return f"{module}.{qualname}"


def importable_module() -> str | None:
    """The name under which ``import`` would load the running ``__main__`` script, or None.

    ``python -m pkg.mod`` records it in ``__spec__``; ``python pkg/mod.py`` does not, so it
    is derived from the file's path relative to the first ``sys.path`` entry that holds it
    (the script's own directory comes first, as for the worker started from there).
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)  # pkg.__main__ for `python -m pkg`: importable as such
    path = getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    target = os.path.realpath(path)
    for entry in sys.path:
        base = os.path.realpath(entry or os.getcwd())
        rel = os.path.relpath(target, base)
        if rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
            continue
        parts = rel[: -len(".py")].split(os.sep)
        if parts[-1] == "__init__":
            parts.pop()
        if parts and all(p.isidentifier() for p in parts):
            return ".".join(parts)
    return None


def check_importable(name: str) -> None:
    """Refuse to store a job name that only this ``__main__`` process could resolve."""
    if name.startswith("__main__."):
        raise UnimportableJobError(
            f"job {name!r} is defined in a script no worker can import; move it into a "
            "module (e.g. myapp.py, run by `conveyor worker myapp:app`) or register it "
            "with @app.job(name=...) in a module the worker imports"
        )
