"""A job function's call checked at enqueue: arguments that could never bind to the
function's signature are refused before anything is stored (docs/api.md, "Enqueueing").

Without the check a wrong call is stored, fails in the worker with the ``TypeError`` Python
raises there, and is retried by the job's rules (25 times over about 25 days by default); a
workflow waiting on it stalls meanwhile. Celery checks a call the same way at ``.delay()``.

``CallShape.check`` binds with ``inspect.Signature.bind``; ``fits`` is the bulk path's
shortcut for the common item (positional arguments only), one comparison per item.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["CallShape", "split_item"]

_RESULT = object()  # stands for a result a workflow node receives in front of its arguments
_VARIADIC = 1 << 62


class CallShape:
    """What calls a function accepts; ``None`` parts when Python cannot tell (a builtin)."""

    __slots__ = ("_least", "_most", "_name", "_sig")

    def __init__(self, func: Callable[..., Any], name: str) -> None:
        self._name = name
        try:
            found = inspect.signature(func)
            # Annotations left out: the error names the parameters, in one short line.
            self._sig: inspect.Signature | None = found.replace(
                parameters=[p.replace(annotation=p.empty) for p in found.parameters.values()],
                return_annotation=found.empty)
        except (TypeError, ValueError):  # no signature to check against: nothing is refused
            self._sig = None
        self._least, self._most = _positional_range(self._sig)

    def fits(self, count: int) -> bool:
        """True when ``count`` positional arguments alone bind (the bulk path's shortcut)."""
        return self._least <= count <= self._most

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any], leading: int = 0,
              what: str = "") -> None:
        """Raise ``TypeError`` (one line) unless ``args``/``kwargs`` bind, after ``leading``
        results given in front of them (a workflow node's parents' results, an errback's job
        id, error and traceback). ``what`` names the call (an ``enqueue_many`` item)."""
        if self._sig is None or (not kwargs and leading == 0 and self.fits(len(args))):
            return
        try:
            self._sig.bind(*([_RESULT] * leading), *args, **kwargs)
        except TypeError as exc:
            given = f" after the {_plural(leading, 'value')} it receives" if leading else ""
            head = f"{what}: " if what else ""
            text = f"{head}cannot call {self._name}{self._sig}{given}: {exc}"
            raise TypeError(" ".join(text.split())) from None


def _positional_range(sig: inspect.Signature | None) -> tuple[int, int]:
    """(fewest, most) positional arguments a call of only positional arguments may pass;
    (1, 0) (nothing fits) when a keyword-only parameter is required."""
    if sig is None:
        return 0, _VARIADIC
    least = most = 0
    for param in sig.parameters.values():
        kind = param.kind
        if kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            most += 1
            if param.default is param.empty:
                least = most
        elif kind is param.VAR_POSITIONAL:
            most = _VARIADIC
        elif kind is param.KEYWORD_ONLY and param.default is param.empty:
            return 1, 0
    return least, most


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def split_item(item: Any, index: int) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """(args, kwargs) of one ``enqueue_many`` item; ``TypeError`` naming the item otherwise."""
    if isinstance(item, Mapping):
        return (), item
    if (
        isinstance(item, tuple) and len(item) == 2
        and isinstance(item[0], (list, tuple)) and isinstance(item[1], Mapping)
    ):
        return item[0], item[1]
    if isinstance(item, (list, tuple)):
        return item, {}
    raise TypeError(
        f"enqueue_many item {index} is a {type(item).__name__}; give a list/tuple of args, "
        "a dict of kwargs, or an (args, kwargs) tuple"
    )
